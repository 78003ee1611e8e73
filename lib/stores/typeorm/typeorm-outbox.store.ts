import type { DataSource } from 'typeorm';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { OutboxEvent } from '../../interfaces/outbox-event.interface';
import {
  AppendableEvent,
  ClaimedDelivery,
  ClaimRequest,
  CleanupOptions,
  CleanupResult,
  DeadLetter,
  DeadLetterFilter,
  DeadLetterPage,
  DeadLetterPageQuery,
  DeadLetterReason,
  DeadLetterSelector,
  DeadLetterSummaryRow,
  DeliveryErrorInput,
  DeliveryPage,
  DeliveryPageQuery,
  EventPage,
  EventPageQuery,
  EventRecord,
  HandlerBacklog,
  Lease,
  OutboxStore,
  OutboxStoreStats,
  StoreAppendOptions,
  StoreCatalog,
} from '../../interfaces/outbox-store.interface';
import type { SqlExecutor } from '../../executors/sql-executor';
import { TypeOrmExecutor } from '../../executors/typeorm-executor';
import { AckOp } from './ops/acks';
import { AppendOp } from './ops/append';
import { ClaimOp } from './ops/claim';
import { CommitWatch } from './ops/commit-watch';
import { StoreContext, TypeOrmOutboxStoreOptions } from './ops/context';
import { DeadLetterOps } from './ops/dead-letters';
import { InspectionOps } from './ops/inspection';
import { LeaseOps } from './ops/leases';
import { MaintenanceOps } from './ops/maintenance';
import { ensureOutboxSchema, outboxSchemaStatus } from './schema/schema';

export type { TypeOrmOutboxStoreOptions } from './ops/context';

/**
 * Outbox store on PostgreSQL, MySQL/MariaDB or SQLite, over an executor (lib/executors: TypeORM,
 * node-postgres). Appends can join the caller's transaction; every other operation is one short
 * statement or transaction, so no connection or transaction is held while a handler runs.
 *
 * A facade: each concern lives in `ops/` (append, commit watch, claim and expansion, leases,
 * acks, dead letters, maintenance), the SQL that differs per database in `dialects/<name>/`,
 * the tables and migrations in `schema/`.
 */
export class SqlOutboxStore implements OutboxStore {
  /** `append()` writes in the caller's transaction (`manager` / `tx`, docs/guarantees.md, Guarantees 1). */
  readonly joinsTransactions = true;
  private readonly ctx: StoreContext;
  private readonly commits: CommitWatch;
  private readonly appends: AppendOp;
  private readonly claims: ClaimOp;
  private readonly leases: LeaseOps;
  private readonly acks: AckOp;
  private readonly deadLetters: DeadLetterOps;
  private readonly maintenance: MaintenanceOps;
  private readonly inspection: InspectionOps;
  private initialized?: Promise<void>;

  constructor(
    readonly executor: SqlExecutor,
    private readonly options: TypeOrmOutboxStoreOptions = {},
  ) {
    this.ctx = new StoreContext(executor, options);
    this.commits = new CommitWatch(this.ctx);
    this.appends = new AppendOp(this.ctx, this.commits);
    this.claims = new ClaimOp(this.ctx);
    this.leases = new LeaseOps(this.ctx);
    this.acks = new AckOp(this.ctx);
    this.deadLetters = new DeadLetterOps(this.ctx);
    this.maintenance = new MaintenanceOps(this.ctx);
    this.inspection = new InspectionOps(this.ctx);
  }

  /** Which SQL dialect the DataSource (or executor) selected. */
  get dialectName(): 'postgres' | 'mysql' | 'sqlite' {
    return this.ctx.dialect.name;
  }

  /**
   * Creates or upgrades the tables (`ensureSchema: true`), or checks that they are at the version
   * this release expects: a missing or older schema fails here, with the command that fixes it,
   * instead of every claim failing later.
   */
  init(): Promise<void> {
    this.initialized ??= (
      this.options.ensureSchema
        ? ensureOutboxSchema(this.executor, this.options)
        : this.checkSchema()
    ).then(async () => {
      // The wake-up channel follows the schema the tables are in (PostgreSQL).
      await this.commits.resolveWakeupChannel();
    });
    return this.initialized;
  }

  private async checkSchema(): Promise<void> {
    const status = await outboxSchemaStatus(this.executor, this.options);
    if (status.upToDate) return;
    const prefix = this.ctx.dialect.tables.prefix;
    const found =
      status.current === null
        ? `the outbox tables (${prefix}events, ${prefix}deliveries, …) do not exist`
        : `the outbox tables are at schema version ${status.current}, this release needs ${status.expected}`;
    // The app's inbox table beside them is checked next: one command migrates both.
    const withInbox = this.options.inboxAlongside?.() ?? false;
    const command =
      `\`npx nestjs-outbox schema migrate${withInbox ? '' : ' --outbox'} --url <database url>` +
      `${prefix === 'outbox_' ? '' : ` --prefix ${prefix}`}\`` +
      (withInbox ? ' (the outbox tables and the inbox table of @Inbox())' : '');
    if (!(this.executor instanceof TypeOrmExecutor)) {
      throw new OutboxOptionsError(
        'store.ensureSchema',
        `${found}. Run ${command}, or add the DDL that ` +
          `\`npx nestjs-outbox schema sql${withInbox ? '' : ' --outbox'} --dialect ${this.ctx.dialect.name}\` prints to your migrations, ` +
          'or set ensureSchema: true to let the app create them.',
      );
    }
    throw new OutboxOptionsError(
      'store.ensureSchema',
      `${found}. Run ${command}, or add the migrations (NestjsOutboxSchema1780000000000, ` +
        'NestjsOutboxSchema1781000000000 and NestjsOutboxSchema1782000000000, or createOutboxMigration for your prefix' +
        (withInbox
          ? '; for the inbox table createInboxMigration() and createInboxFingerprintMigration()'
          : '') +
        ') to your DataSource, ' +
        'or set ensureSchema: true to let the app create them.' +
        (status.current === null
          ? ' An app that only consumes messages (@Inbox()) needs no outbox tables: import ' +
            'InboxModule.forRoot({ dataSource }) instead of OutboxModule.'
          : ''),
    );
  }

  /** Creates the outbox tables if missing (safe when several replicas call it at once). */
  ensureSchema(): Promise<void> {
    return ensureOutboxSchema(this.executor, this.options);
  }

  now(): Promise<Date> {
    return this.maintenance.now();
  }

  // ---------------------------------------------------------------- append and commits

  append(events: AppendableEvent[], options?: StoreAppendOptions): Promise<OutboxEvent[]> {
    return this.appends.append(events, options);
  }

  publishWakeups(): void {
    this.commits.publishWakeups();
  }

  onWakeup(listener: () => void): () => Promise<void> {
    return this.commits.onWakeup(listener);
  }

  /**
   * The NOTIFY channel of this outbox (PostgreSQL), `null` elsewhere; without a configured schema,
   * known once `init()` or `resolveWakeupChannel()` read the connection's `current_schema()`.
   */
  get wakeupChannel(): string | null {
    return this.commits.wakeupChannel;
  }

  /** The NOTIFY channel of the schema the tables are in (PostgreSQL), `null` elsewhere. */
  resolveWakeupChannel(): Promise<string | null> {
    return this.commits.resolveWakeupChannel();
  }

  onAppended(listener: () => void): () => void {
    return this.commits.onAppended(listener);
  }

  /**
   * Stops signalling and listening, leaves nothing behind on the DataSource, and ends what the
   * executor opened itself (the Prisma MariaDB executor's pool), never the caller's client.
   */
  async close(): Promise<void> {
    await this.commits.close();
    await this.executor.close?.();
  }

  // ---------------------------------------------------------------- claim and leases

  claim(request: ClaimRequest): Promise<ClaimedDelivery[]> {
    return this.claims.claim(request);
  }

  renew(lease: Lease, leaseMs: number): Promise<Lease> {
    return this.leases.renew(lease, leaseMs);
  }

  ack(lease: Lease): Promise<void> {
    return this.acks.ack(lease);
  }

  ackMany(leases: Lease[]): Promise<string[]> {
    return this.acks.ackMany(leases);
  }

  retry(lease: Lease, delayMs: number, error: DeliveryErrorInput): Promise<void> {
    return this.leases.retry(lease, delayMs, error);
  }

  deadLetter(lease: Lease, reason: DeadLetterReason, error: DeliveryErrorInput): Promise<void> {
    return this.leases.deadLetter(lease, reason, error);
  }

  release(lease: Lease): Promise<void> {
    return this.leases.release(lease);
  }

  // ---------------------------------------------------------------- dead letters

  listDeadLetters(query: DeadLetterPageQuery): Promise<DeadLetterPage> {
    return this.deadLetters.list(query);
  }

  getDeadLetter(id: string): Promise<DeadLetter | null> {
    return this.deadLetters.get(id);
  }

  summarizeDeadLetters(filter: DeadLetterFilter): Promise<DeadLetterSummaryRow[]> {
    return this.deadLetters.summarize(filter);
  }

  replay(selector: DeadLetterSelector, availableAt?: Date): Promise<number> {
    return this.deadLetters.replay(selector, availableAt);
  }

  purge(selector: DeadLetterSelector): Promise<number> {
    return this.deadLetters.purge(selector);
  }

  // ---------------------------------------------------------------- inspection (admin API)

  listDeliveries(query: DeliveryPageQuery): Promise<DeliveryPage> {
    return this.inspection.listDeliveries(query);
  }

  inspectEvent(id: string): Promise<EventRecord | null> {
    return this.inspection.inspectEvent(id);
  }

  listEventsByKey(query: EventPageQuery): Promise<EventPage> {
    return this.inspection.listEventsByKey(query);
  }

  catalog(limit: number): Promise<StoreCatalog> {
    return this.inspection.catalog(limit);
  }

  backlog(): Promise<HandlerBacklog[]> {
    return this.inspection.backlog();
  }

  // ---------------------------------------------------------------- stats and retention

  stats(): Promise<OutboxStoreStats> {
    return this.maintenance.stats();
  }

  cleanup(options: CleanupOptions): Promise<CleanupResult> {
    return this.maintenance.cleanup(options);
  }
}

/** The SQL store over a TypeORM `DataSource` (today's `type: 'typeorm'`). */
export class TypeOrmOutboxStore extends SqlOutboxStore {
  constructor(
    readonly dataSource: DataSource,
    options: TypeOrmOutboxStoreOptions = {},
  ) {
    super(new TypeOrmExecutor(dataSource), options);
  }
}

/** Fails early, with the fix, when options cannot work. */
export function asTypeOrmDataSource(dataSource: unknown): DataSource {
  const ds = dataSource as Partial<DataSource> | undefined;
  if (!ds || typeof ds !== 'object' || !ds.options || typeof ds.createQueryRunner !== 'function') {
    throw new OutboxOptionsError(
      'store.dataSource',
      'expected a TypeORM DataSource (or set store.dataSourceToken)',
    );
  }
  return ds as DataSource;
}
