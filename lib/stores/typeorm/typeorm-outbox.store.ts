import { randomUUID } from 'node:crypto';
import type { DataSource, QueryRunner } from 'typeorm';
import { DuplicateEventError } from '../../errors/duplicate-event.error';
import { LeaseLostError } from '../../errors/lease-lost.error';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { OutboxValidationError } from '../../errors/outbox-validation.error';
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
  DeliveryError,
  DeliveryErrorInput,
  Lease,
  OutboxStore,
  OutboxStoreStats,
  StoreAppendOptions,
} from '../../interfaces/outbox-store.interface';
import { OUTBOX_ERROR_HISTORY, UNEXPANDED_HANDLER } from '../../outbox.constants';
import { isUuid } from '../../outbox-validation';
import {
  AppendListeners,
  decodeCursor,
  encodeCursor,
  errorFingerprint,
  sameEventContent,
} from '../store-helpers';
import { CoalescedSignal } from '../wakeups';
import { createDialect } from './dialects';
import { PostgresWakeups, wakeupChannel } from './dialects/postgres/wakeups';
import {
  AppendRow,
  ClaimCandidates,
  InsertedEvent,
  Plan,
  Row,
  SqlDialect,
  StatementResult,
} from './dialects/sql-dialect';
import { EMPTY, join, list, raw, sql, SqlText } from './sql';
import { OutboxTableOptions } from './schema/tables';
import { ensureOutboxSchema, outboxSchemaStatus } from './schema/schema';

export interface TypeOrmOutboxStoreOptions extends OutboxTableOptions {
  /** Longest error message stored per failure, in characters. @default 4096 */
  errorMaxLength?: number;
  /** `init()` creates missing tables (see `ensureOutboxSchema`). @default false */
  ensureSchema?: boolean;
  /**
   * PostgreSQL: run the claim, ack and append as named prepared statements (parsed and planned
   * once per connection). Turn off behind a pooler that does not keep prepared statements
   * (PgBouncer in transaction mode before 1.21). @default true
   */
  preparedStatements?: boolean;
  /** Called when a wake-up NOTIFY or the LISTEN connection fails (logged by the module). */
  onWakeupError?: (error: unknown) => void;
}

/** Unexpanded deliveries turned into per-handler ones per claim, at most. */
const EXPAND_BATCH = 500;
/**
 * After a probe finds no unexpanded delivery, claims skip the probe this long (a round trip
 * saved per claim). Order stays safe meanwhile: placeholders still hold their keys in the claim
 * itself; only the first delivery of a type this process cannot name waits up to this long.
 */
const EXPAND_PROBE_QUIET_MS = 1_000;
const EVENTS_PER_INSERT = 1000;
/** Ids bound in one statement by bulk operations (replay, purge, cleanup, undo). */
const ID_BATCH = 1000;
/**
 * Leases per `ackMany` statement: 4 bound parameters each (plus one), far below every dialect's
 * limit (SQLite 32,766, PostgreSQL 65,535) and a statement each database plans quickly.
 */
const ACK_MANY_CHUNK = 500;

/** Column list of the dead letters table, in the order `moveRows` fills it. */
const DEAD_COLUMNS =
  'id, event_seq, event_type, event_key, handler, attempts, reason, errors, dead_at';
/** Column list of deliveries as replay writes them back. */
const REPLAY_COLUMNS =
  'id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors';

/**
 * Outbox store over a TypeORM `DataSource` on PostgreSQL, MySQL/MariaDB or SQLite. Appends can
 * join the caller's transaction; every other operation is one short statement or transaction,
 * so no connection or transaction is held while a handler runs.
 */
export class TypeOrmOutboxStore implements OutboxStore {
  private expandQuietUntil = 0;
  private readonly appendListeners = new AppendListeners();
  /** Caller transactions holding appends, and whether those include placeholders. */
  private readonly awaitingCommit = new WeakMap<QueryRunner, boolean>();
  private commitHook: object | null = null;
  /** PostgreSQL only: NOTIFY / LISTEN between processes (README "Wake-ups"). */
  private readonly wakeups: PostgresWakeups | null;
  /** Set by `publishWakeups`: signals other processes after appends commit. */
  private wakeupSignal: CoalescedSignal | null = null;
  private readonly wakeupListeners = new Set<() => Promise<void>>();

  private readonly dialect: SqlDialect;
  private readonly errorMaxLength: number;
  private initialized?: Promise<void>;

  constructor(
    readonly dataSource: DataSource,
    private readonly options: TypeOrmOutboxStoreOptions = {},
  ) {
    this.dialect = createDialect(dataSource, options);
    this.errorMaxLength = options.errorMaxLength ?? 4096;
    this.wakeups =
      this.dialect.name === 'postgres'
        ? new PostgresWakeups(
            dataSource,
            wakeupChannel(this.dialect.tables.prefix, this.dialect.tables.schema),
            (error) => this.options.onWakeupError?.(error),
          )
        : null;
  }

  /** Which SQL dialect the DataSource selected. */
  get dialectName(): 'postgres' | 'mysql' | 'sqlite' {
    return this.dialect.name;
  }

  /**
   * Creates or upgrades the tables (`ensureSchema: true`), or checks that they are at the version
   * this release expects: a missing or older schema fails here, with the command that fixes it,
   * instead of every claim failing later.
   */
  init(): Promise<void> {
    this.initialized ??= this.options.ensureSchema
      ? ensureOutboxSchema(this.dataSource, this.options)
      : this.checkSchema();
    return this.initialized;
  }

  private async checkSchema(): Promise<void> {
    const status = await outboxSchemaStatus(this.dataSource, this.options);
    if (status.upToDate) return;
    const prefix = this.dialect.tables.prefix;
    const found =
      status.current === null
        ? `the outbox tables (${prefix}events, ${prefix}deliveries, …) do not exist`
        : `the outbox tables are at schema version ${status.current}, this release needs ${status.expected}`;
    throw new OutboxOptionsError(
      'store.ensureSchema',
      `${found}. Run \`npx nestjs-outbox schema migrate --outbox --url <database url>\`` +
        `${prefix === 'outbox_' ? '' : ` --prefix ${prefix}`}, or add the migrations (NestjsOutboxSchema1780000000000, ` +
        'NestjsOutboxSchema1781000000000 and NestjsOutboxSchema1782000000000, or createOutboxMigration for your prefix) to your DataSource, ' +
        'or set ensureSchema: true to let the app create them.',
    );
  }

  /** Creates the outbox tables if missing (safe when several replicas call it at once). */
  ensureSchema(): Promise<void> {
    return ensureOutboxSchema(this.dataSource, this.options);
  }

  private get E(): SqlText {
    return this.dialect.tables.events;
  }

  private get D(): SqlText {
    return this.dialect.tables.deliveries;
  }

  private get DL(): SqlText {
    return this.dialect.tables.deadLetters;
  }

  private one<T = StatementResult>(stmt: SqlText, map?: (r: StatementResult) => T): Promise<T> {
    return this.dialect.run(function* (): Plan<T> {
      const result = yield stmt;
      return map ? map(result) : (result as T);
    });
  }

  async now(): Promise<Date> {
    const { rows } = await this.one(sql`SELECT ${this.dialect.timeOut(this.dialect.now)} AS now`);
    return this.dialect.readTime(rows[0]?.now);
  }

  // ---------------------------------------------------------------- append

  async append(
    events: AppendableEvent[],
    options: StoreAppendOptions = {},
  ): Promise<OutboxEvent[]> {
    // This process wrote a placeholder: the next claim must look for it at once.
    if (events.some((e) => e.handlers.length === 0)) this.expandQuietUntil = 0;
    const runner =
      options.manager === undefined || options.manager === null
        ? null
        : this.transactionOf(options.manager);
    if (events.length === 0) return [];
    const batch = dedupeBatch(events);
    const plan = () => this.appendPlan(batch);
    const attempt = () =>
      runner ? this.dialect.runOn(runner, plan) : this.dialect.run(plan, { transaction: true });
    let stored: OutboxEvent[];
    try {
      stored = orderLike(events, await attempt());
    } catch (error) {
      // Another transaction inserted one of these ids between our check and our insert; the
      // second pass sees it and compares contents (see Guarantees: idempotent append).
      if (!this.dialect.isUniqueViolation(error)) throw error;
      stored = orderLike(events, await attempt());
    }
    const placeholders = events.some((e) => e.handlers.length === 0);
    if (runner && this.commitHook) {
      // Our own transaction has committed; the caller's tells us when it does (see onAppended).
      this.awaitingCommit.set(runner, placeholders || this.awaitingCommit.get(runner) === true);
    } else if (!runner) {
      this.appended(placeholders);
    }
    return stored;
  }

  /**
   * Appends are committed: wake listeners and other processes, and look for new placeholders on
   * the next claim.
   */
  private appended(placeholders: boolean): void {
    // A claim that ran while they were uncommitted may have started a quiet period.
    if (placeholders) this.expandQuietUntil = 0;
    this.appendListeners.notify();
    this.wakeupSignal?.signal();
  }

  /**
   * PostgreSQL: after appends commit, NOTIFY other processes (coalesced, outside the producer's
   * transaction; a rollback sends nothing). MySQL/MariaDB and SQLite have no such channel.
   */
  publishWakeups(): void {
    const wakeups = this.wakeups;
    if (!wakeups || this.wakeupSignal) return;
    this.wakeupSignal = new CoalescedSignal(
      () => wakeups.notify(),
      (error) => this.options.onWakeupError?.(error),
    );
    this.installCommitHook();
  }

  /**
   * PostgreSQL: listens for other processes' commits on one dedicated connection. A wake-up also
   * ends the quiet period of the placeholder probe, so events of types the producer has no
   * handler for are expanded by the next claim. Other dialects: never calls `listener`.
   */
  onWakeup(listener: () => void): () => Promise<void> {
    if (!this.wakeups) return () => Promise.resolve();
    const stop = this.wakeups.listen(() => {
      this.expandQuietUntil = 0;
      listener();
    });
    this.wakeupListeners.add(stop);
    return () => {
      this.wakeupListeners.delete(stop);
      return stop();
    };
  }

  /** The NOTIFY channel of this outbox (PostgreSQL), `null` elsewhere. */
  get wakeupChannel(): string | null {
    return this.wakeups?.channel ?? null;
  }

  /** Stops signalling and listening, and leaves nothing behind on the DataSource. */
  async close(): Promise<void> {
    this.wakeupSignal?.close();
    this.wakeupSignal = null;
    await Promise.all([...this.wakeupListeners].map((stop) => stop()));
    this.wakeupListeners.clear();
    if (this.appendListeners.size === 0) this.removeCommitHook();
  }

  /**
   * Listeners hear of appends once they are committed: at once for the store's own transaction,
   * and through a TypeORM subscriber (`afterTransactionCommit`) for the caller's.
   */
  onAppended(listener: () => void): () => void {
    this.installCommitHook();
    // The DataSource may outlive this store (tests, several apps): leave nothing behind on it.
    return this.appendListeners.add(listener, () => {
      if (!this.wakeupSignal) this.removeCommitHook();
    });
  }

  private installCommitHook(): void {
    if (!this.commitHook) {
      this.commitHook = {
        afterTransactionCommit: (event: { queryRunner?: QueryRunner }) => {
          const runner = event.queryRunner;
          // A released savepoint also reports a commit; only the outermost one counts.
          if (!runner || runner.isTransactionActive || !this.awaitingCommit.has(runner)) return;
          const placeholders = this.awaitingCommit.get(runner) === true;
          this.awaitingCommit.delete(runner);
          this.appended(placeholders);
        },
        afterTransactionRollback: (event: { queryRunner?: QueryRunner }) => {
          if (event.queryRunner && !event.queryRunner.isTransactionActive) {
            this.awaitingCommit.delete(event.queryRunner);
          }
        },
      };
      this.dataSource.subscribers.push(this.commitHook as never);
    }
  }

  private removeCommitHook(): void {
    const index = this.commitHook
      ? this.dataSource.subscribers.indexOf(this.commitHook as never)
      : -1;
    if (index >= 0) this.dataSource.subscribers.splice(index, 1);
    this.commitHook = null;
  }

  /** The open transaction a caller's EntityManager or QueryRunner belongs to, or a clear refusal. */
  private transactionOf(manager: unknown): QueryRunner {
    const m = manager as Partial<QueryRunner> & { queryRunner?: QueryRunner };
    const runner: QueryRunner | undefined =
      typeof m?.startTransaction === 'function' && typeof m.query === 'function'
        ? (m as QueryRunner)
        : m?.queryRunner;
    if (!runner || !runner.isTransactionActive || runner.isReleased) {
      throw new OutboxValidationError(
        'options.manager',
        'is not inside an open transaction, so the event could be committed without your business write. ' +
          'Pass the EntityManager that dataSource.transaction(async (manager) => { ... }) gives its callback, ' +
          'or queryRunner.manager (or the QueryRunner) after await queryRunner.startTransaction(); ' +
          'or omit manager to let the outbox commit the event in its own transaction.',
      );
    }
    const owner =
      (runner as { dataSource?: unknown; connection?: unknown }).dataSource ?? runner.connection;
    if (owner !== this.dataSource) {
      throw new OutboxValidationError(
        'options.manager',
        'belongs to a different DataSource than the outbox store; use a transaction of the DataSource given in store.dataSource',
      );
    }
    return runner;
  }

  /**
   * The common case is the dialect's insert alone (one statement on PostgreSQL, two elsewhere):
   * no read before the write and no savepoint. Only when an id exists already does it read the
   * stored events to compare contents; a different content undoes what this call inserted and
   * fails, so the caller's transaction holds nothing of the batch. The read is a plain one: a
   * locking read would take gap locks on MySQL's REPEATABLE READ and make appenders deadlock.
   */
  private *appendPlan(batch: AppendableEvent[]): Plan<OutboxEvent[]> {
    const d = this.dialect;
    const rows = batch.map(toAppendRow);
    const inserted = new Map<string, InsertedEvent>();
    const insert = function* (todo: AppendRow[]): Plan<void> {
      for (const chunk of chunkBySize(todo, d.maxStatementBytes)) {
        for (const [id, row] of yield* d.appendEvents(chunk)) inserted.set(id, row);
      }
    };
    try {
      yield* insert(rows);
    } catch (error) {
      // MySQL and SQLite refuse the whole statement on a duplicate id and write none of it.
      if (!d.isUniqueViolation(error)) throw error;
    }
    const rest = rows.filter((r) => !inserted.has(r.id.toLowerCase()));
    const existing = new Map<string, OutboxEvent>();
    if (rest.length > 0) {
      const { rows: found } =
        yield sql`SELECT ${this.eventColumns('e')} FROM ${this.E} e WHERE e.id IN (${list(rest.map((r) => r.id))})`;
      for (const r of found) existing.set(String(r.event_id).toLowerCase(), this.toEvent(r));
      const conflict = batch.find((e) => {
        const stored = existing.get(e.id.toLowerCase());
        return stored !== undefined && !sameEventContent(stored, e);
      });
      if (conflict) {
        yield* this.undoAppend([...inserted.values()].map((r) => r.seq));
        throw new DuplicateEventError(conflict.id);
      }
      yield* insert(rest.filter((r) => !existing.has(r.id.toLowerCase())));
    }
    return batch.map((event) => {
      const stored = existing.get(event.id.toLowerCase());
      if (stored) return stored;
      return {
        id: event.id,
        type: event.type,
        payload: structuredClone(event.payload),
        key: event.key,
        headers: { ...event.headers },
        occurredAt: new Date(event.occurredAt),
        availableAt: inserted.get(event.id.toLowerCase())!.availableAt,
      };
    });
  }

  /** Removes events (and their deliveries) this append wrote before it found a conflict. */
  private *undoAppend(seqs: number[]): Plan<void> {
    for (let i = 0; i < seqs.length; i += ID_BATCH) {
      const some = list(seqs.slice(i, i + ID_BATCH));
      yield sql`DELETE FROM ${this.D} WHERE event_seq IN (${some})`;
      yield sql`DELETE FROM ${this.E} WHERE seq IN (${some})`;
    }
  }

  // ---------------------------------------------------------------- claim

  async claim(request: ClaimRequest): Promise<ClaimedDelivery[]> {
    const names = [...new Set(request.handlers.map((h) => h.name))];
    if (names.length === 0 || request.limit <= 0) return [];
    await this.expand(request);
    const d = this.dialect;
    const token = randomUUID();
    const unexpanded = this.unexpandedBlocker(request);
    const candidates: ClaimCandidates = ({
      limit,
      lock,
      within,
      columns,
    }) => sql`SELECT ${columns ?? raw('c.id')} FROM ${this.D} c${within ? sql` ${d.byId}` : EMPTY}
WHERE c.handler IN (${list(names)}) AND c.status IN ('pending', 'leased')${within ? sql` AND c.id IN (${list(within)})` : EMPTY}
  AND ((c.status = 'pending' AND c.available_at <= ${d.now}) OR (c.status = 'leased' AND c.lease_until <= ${d.now}))
  AND (c.event_key IS NULL OR (NOT EXISTS (
    SELECT 1 FROM ${this.D} p
    WHERE p.handler = c.handler AND p.event_key = c.event_key AND p.status IN ('pending', 'leased') AND p.event_seq < c.event_seq)${unexpanded}))
ORDER BY c.event_seq
LIMIT ${Math.floor(limit)} ${lock ? d.skipLocked : EMPTY}`;
    const columns = sql`d.id, d.handler, d.attempts, d.lease_owner, d.lease_token, ${d.timeOut(raw('d.lease_until'))} AS lease_until, d.event_seq, ${this.eventColumns('e')}`;
    const rows = await d.run(
      () =>
        d.claim(
          {
            handlers: names,
            limit: request.limit,
            leaseMs: request.leaseMs,
            owner: request.workerId,
            token,
          },
          candidates,
          columns,
        ),
      d.claimRunOptions,
    );
    return rows
      .sort(
        (a, b) =>
          Number(a.event_seq) - Number(b.event_seq) ||
          String(a.handler).localeCompare(String(b.handler)),
      )
      .map((r) => ({
        id: String(r.id),
        handler: String(r.handler),
        attempt: Number(r.attempts),
        event: this.toEvent(r),
        lease: {
          deliveryId: String(r.id),
          owner: String(r.lease_owner),
          token: String(r.lease_token),
          leaseUntil: d.readTime(r.lease_until),
        },
      }));
  }

  /**
   * Per-key order across expansion (README Guarantees 6): an earlier event of the key that is still an
   * unexpanded delivery of a type the handler subscribes to will become one of the handler's
   * deliveries, so it blocks the later ones just as that delivery would. This covers placeholders
   * this claim did not get to expand (a backlog beyond EXPAND_BATCH, or not due yet) and those
   * another worker is expanding right now: its row is locked (SKIP LOCKED skipped it) but, until
   * that transaction commits, the committed placeholder is still what this statement reads, and
   * afterwards the expanded copies are. Served by the (handler, event_key, event_seq) index.
   */
  private unexpandedBlocker(request: ClaimRequest): SqlText {
    const typesOf = new Map<string, Set<string>>();
    for (const h of request.handlers) {
      const types = typesOf.get(h.name) ?? new Set<string>();
      for (const type of h.types) types.add(type);
      typesOf.set(h.name, types);
    }
    // Handlers with the same types share one condition (usually: one per type).
    const byTypes = new Map<string, { handlers: string[]; types: string[] }>();
    for (const [handler, types] of typesOf) {
      if (types.size === 0) continue;
      const sorted = [...types].sort();
      const k = JSON.stringify(sorted);
      const group = byTypes.get(k) ?? { handlers: [], types: sorted };
      group.handlers.push(handler);
      byTypes.set(k, group);
    }
    if (byTypes.size === 0) return EMPTY;
    const which = join(
      [...byTypes.values()].map(
        (g) => sql`(c.handler IN (${list(g.handlers)}) AND u.event_type IN (${list(g.types)}))`,
      ),
      ' OR ',
    );
    return sql` AND NOT EXISTS (
    SELECT 1 FROM ${this.D} u
    WHERE u.handler = ${UNEXPANDED_HANDLER} AND u.event_key = c.event_key AND u.status IN ('pending', 'leased') AND u.event_seq < c.event_seq AND (${which}))`;
  }

  /**
   * Turns due unexpanded deliveries of types this worker handles into one delivery per handler,
   * oldest first, keeping the event's position so per-key order holds across the expansion.
   * Placeholders not due yet stay as they are until they are (they still hold their key, see
   * `unexpandedBlocker`), so a backlog of scheduled events never delays the due ones.
   */
  private async expand(request: ClaimRequest): Promise<void> {
    const byType = new Map<string, string[]>();
    for (const h of request.handlers) {
      for (const type of h.types)
        byType.set(type, [...new Set([...(byType.get(type) ?? []), h.name])]);
    }
    if (byType.size === 0) return;
    const select = (lock: SqlText) =>
      sql`SELECT id, event_type FROM ${this.D} WHERE handler = ${UNEXPANDED_HANDLER} AND status = 'pending' AND available_at <= ${this.dialect.now} AND event_type IN (${list([...byType.keys()])}) ORDER BY event_seq LIMIT ${raw(String(EXPAND_BATCH))} ${lock}`;
    // Cheap unlocked probe first, so the common case costs one statement and no transaction, and
    // after an empty probe none at all for a while (an app-clock throttle, not a due time).
    if (performance.now() < this.expandQuietUntil) return;
    const probe = await this.one(select(EMPTY));
    if (probe.rows.length === 0) {
      this.expandQuietUntil = performance.now() + EXPAND_PROBE_QUIET_MS;
      return;
    }
    const d = this.dialect;
    const D = this.D;
    await d.run(
      function* (): Plan<void> {
        const { rows } = yield select(d.skipLocked);
        if (rows.length === 0) return;
        const copies: SqlText[] = [];
        for (const row of rows) {
          for (const handler of byType.get(String(row.event_type)) ?? []) {
            copies.push(
              sql`SELECT ${d.uuid(randomUUID())}, event_seq, event_type, event_key, ${handler}, status, attempts, available_at, errors FROM ${D} WHERE id = ${row.id}`,
            );
          }
        }
        yield sql`INSERT INTO ${D} (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors) ${join(copies, ' UNION ALL ')}`;
        yield sql`DELETE FROM ${D} WHERE id IN (${list(rows.map((r) => r.id))})`;
      },
      { transaction: true, deadlockRetries: 3 },
    );
  }

  // ---------------------------------------------------------------- lease operations

  private fenced(lease: Lease): SqlText {
    return sql`id = ${lease.deliveryId} AND status = 'leased' AND lease_owner = ${lease.owner} AND lease_token = ${lease.token} AND lease_until > ${this.dialect.now}`;
  }

  private async settle(lease: Lease, set: SqlText): Promise<void> {
    if (!isUuid(lease.deliveryId)) throw new LeaseLostError(lease.deliveryId, lease.owner);
    const { affected } = await this.one(
      sql`UPDATE ${this.D} ${this.dialect.byId} SET ${set}, lease_owner = NULL, lease_token = NULL, lease_until = NULL WHERE ${this.fenced(lease)}`,
    );
    if (affected === 0) throw new LeaseLostError(lease.deliveryId, lease.owner);
  }

  async renew(lease: Lease, leaseMs: number): Promise<Lease> {
    if (!isUuid(lease.deliveryId)) throw new LeaseLostError(lease.deliveryId, lease.owner);
    const d = this.dialect;
    const update = sql`UPDATE ${this.D} ${d.byId} SET lease_until = ${d.plusMs(d.now, leaseMs)} WHERE ${this.fenced(lease)}`;
    const until = d.timeOut(raw('lease_until'));
    const check = sql`SELECT ${until} AS lease_until FROM ${this.D} ${d.byId} WHERE id = ${lease.deliveryId} AND status = 'leased' AND lease_owner = ${lease.owner} AND lease_token = ${lease.token}`;
    const rows = await d.run(function* (): Plan<Row[]> {
      if (d.updateReturning) return (yield sql`${update} RETURNING ${until} AS lease_until`).rows;
      if ((yield update).affected === 0) return [];
      return (yield check).rows;
    });
    if (rows.length === 0) throw new LeaseLostError(lease.deliveryId, lease.owner);
    return { ...lease, leaseUntil: d.readTime(rows[0].lease_until) };
  }

  async ack(lease: Lease): Promise<void> {
    const acked = await this.ackMany([lease]);
    if (acked.length === 0) throw new LeaseLostError(lease.deliveryId, lease.owner);
  }

  /**
   * Acknowledged deliveries leave the table (the claim reads open work only); the event stays
   * until retention removes it. Fenced like every lease operation: only rows whose lease still
   * matches and is live go, in one statement per chunk (arrays on PostgreSQL).
   */
  async ackMany(leases: Lease[]): Promise<string[]> {
    // A lease that is not a UUID cannot own a row (and PostgreSQL would reject it as a uuid).
    const valid = leases.filter((l) => isUuid(l.deliveryId));
    if (valid.length === 0) return [];
    // Primary-key order: concurrent batches lock rows in one order.
    valid.sort((a, b) => (a.deliveryId < b.deliveryId ? -1 : a.deliveryId > b.deliveryId ? 1 : 0));
    const d = this.dialect;
    const rows: Row[] = [];
    for (let i = 0; i < valid.length; i += ACK_MANY_CHUNK) {
      const chunk = valid.slice(i, i + ACK_MANY_CHUNK);
      rows.push(...(await d.run(() => d.deleteLeased(chunk), d.deleteLeasedRunOptions)));
    }
    // Report each acknowledged delivery under the id its caller gave.
    const given = new Map(valid.map((l) => [l.deliveryId.toLowerCase(), l.deliveryId]));
    const out = new Set<string>();
    for (const r of rows) {
      const id = String(r.id).toLowerCase();
      out.add(given.get(id) ?? id);
    }
    return [...out];
  }

  retry(lease: Lease, delayMs: number, error: DeliveryErrorInput): Promise<void> {
    const d = this.dialect;
    return this.settle(
      lease,
      sql`status = 'pending', available_at = ${d.plusMs(d.now, retryDelay(delayMs))}, errors = ${this.errorEntry(error)}`,
    );
  }

  /** Moves the delivery to the dead letters (fenced: only while the lease holds). */
  async deadLetter(
    lease: Lease,
    reason: DeadLetterReason,
    error: DeliveryErrorInput,
  ): Promise<void> {
    if (!isUuid(lease.deliveryId)) throw new LeaseLostError(lease.deliveryId, lease.owner);
    const d = this.dialect;
    const moved = await d.run(
      () =>
        d.moveRows({
          from: this.D,
          to: this.DL,
          where: this.fenced(lease),
          columns: DEAD_COLUMNS,
          values: sql`id, event_seq, event_type, event_key, handler, attempts, ${reason}, ${this.errorEntry(error)}, ${d.now}`,
        }),
      d.moveRunOptions,
    );
    if (moved.length === 0) throw new LeaseLostError(lease.deliveryId, lease.owner);
  }

  release(lease: Lease): Promise<void> {
    return this.settle(
      lease,
      sql`status = 'pending', attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, available_at = ${this.dialect.now}`,
    );
  }

  private errorEntry(error: DeliveryErrorInput): SqlText {
    return this.dialect.appendError(
      raw('errors'),
      {
        name: withoutNul(error.name ?? 'Error').slice(0, 255),
        message: withoutNul(error.message ?? '').slice(0, this.errorMaxLength),
        attempt: Math.floor(Number(error.attempt) || 0),
        workerId: withoutNul(error.workerId ?? '').slice(0, 255),
      },
      OUTBOX_ERROR_HISTORY,
    );
  }

  // ---------------------------------------------------------------- dead letters

  /** Conditions selecting dead letters; `a` is the column prefix ('' or 'd.'). */
  private deadWhere(filter: DeadLetterFilter, a = ''): SqlText {
    const d = this.dialect;
    const col = (c: string) => raw(`${a}${c}`);
    const conds = [raw('1 = 1')];
    if (filter.type !== undefined) conds.push(sql`${col('event_type')} = ${filter.type}`);
    if (filter.handler !== undefined) conds.push(sql`${col('handler')} = ${filter.handler}`);
    if (filter.key !== undefined) conds.push(sql`${col('event_key')} = ${filter.key}`);
    if (filter.failedBefore !== undefined)
      conds.push(sql`${col('dead_at')} < ${d.time(filter.failedBefore)}`);
    if (filter.failedAfter !== undefined)
      conds.push(sql`${col('dead_at')} >= ${d.time(filter.failedAfter)}`);
    return join(conds, ' AND ');
  }

  private selectorWhere(selector: DeadLetterSelector): SqlText | null {
    if ('ids' in selector) {
      const ids = [...new Set(selector.ids.filter(isUuid))];
      if (ids.length === 0) return null;
      return sql`id IN (${list(ids)})`;
    }
    return this.deadWhere(selector.filter ?? {});
  }

  private deadColumns(): SqlText {
    const d = this.dialect;
    return sql`d.id, d.handler, d.attempts, d.reason, ${d.jsonOut(raw('d.errors'))} AS errors, ${d.timeOut(raw('d.dead_at'))} AS dead_at, ${this.eventColumns('e')}`;
  }

  private toDeadLetter(r: Row): DeadLetter {
    const event = this.toEvent(r);
    return {
      id: String(r.id),
      eventId: event.id,
      type: event.type,
      key: event.key,
      handler: String(r.handler),
      payload: event.payload,
      headers: event.headers,
      occurredAt: event.occurredAt,
      attempts: Number(r.attempts),
      reason: (r.reason ?? 'exhausted') as DeadLetterReason,
      errors: parseErrors(r.errors),
      deadAt: this.dialect.readTime(r.dead_at),
    };
  }

  async listDeadLetters(query: DeadLetterPageQuery): Promise<DeadLetterPage> {
    const d = this.dialect;
    const limit = Math.max(1, Math.floor(query.limit));
    const after = query.cursor ? decodeCursor(query.cursor) : null;
    if (after && !isUuid(after.id))
      throw new OutboxValidationError('cursor', 'is not a cursor returned by a previous page');
    const keyset = after
      ? sql` AND (d.dead_at > ${d.time(after.deadAt)} OR (d.dead_at = ${d.time(after.deadAt)} AND d.id > ${after.id}))`
      : EMPTY;
    const { rows } = await this.one(
      sql`SELECT ${this.deadColumns()} FROM ${this.DL} d JOIN ${this.E} e ON e.seq = d.event_seq WHERE ${this.deadWhere(query, 'd.')}${keyset} ORDER BY d.dead_at, d.id LIMIT ${raw(String(limit + 1))}`,
    );
    const items = rows.slice(0, limit).map((r) => this.toDeadLetter(r));
    const last = items[items.length - 1];
    return {
      items,
      nextCursor:
        rows.length > limit && last ? encodeCursor({ deadAt: last.deadAt, id: last.id }) : null,
    };
  }

  async getDeadLetter(id: string): Promise<DeadLetter | null> {
    if (!isUuid(id)) return null;
    const { rows } = await this.one(
      sql`SELECT ${this.deadColumns()} FROM ${this.DL} d JOIN ${this.E} e ON e.seq = d.event_seq WHERE d.id = ${id}`,
    );
    return rows[0] ? this.toDeadLetter(rows[0]) : null;
  }

  async summarizeDeadLetters(filter: DeadLetterFilter): Promise<DeadLetterSummaryRow[]> {
    const { rows } = await this.one(
      sql`SELECT d.event_type, d.handler, ${this.dialect.jsonOut(raw('d.errors'))} AS errors FROM ${this.DL} d WHERE ${this.deadWhere(filter, 'd.')}`,
    );
    const groups = new Map<string, DeadLetterSummaryRow>();
    for (const r of rows) {
      const errors = parseErrors(r.errors);
      const last = errors[errors.length - 1];
      const row = {
        type: String(r.event_type),
        handler: String(r.handler),
        errorName: last?.name ?? 'Error',
        fingerprint: errorFingerprint(last?.message ?? ''),
        count: 0,
      };
      const k = JSON.stringify([row.type, row.handler, row.errorName, row.fingerprint]);
      const group = groups.get(k) ?? row;
      group.count += 1;
      groups.set(k, group);
    }
    return [...groups.values()].sort((a, b) => b.count - a.count);
  }

  /**
   * Moves dead letters back to the open deliveries, `ID_BATCH` per transaction until none is
   * left: attempts reset, error history kept, the same delivery id and event position (so per-key
   * order puts it before later events of its key).
   */
  async replay(selector: DeadLetterSelector, availableAt?: Date): Promise<number> {
    const where = this.selectorWhere(selector);
    if (!where) return 0;
    const d = this.dialect;
    const at = availableAt ? d.time(availableAt) : d.now;
    let total = 0;
    for (;;) {
      const moved = await d.run(
        () =>
          d.moveRows({
            from: this.DL,
            to: this.D,
            where,
            limit: ID_BATCH,
            columns: REPLAY_COLUMNS,
            values: sql`id, event_seq, event_type, event_key, handler, 'pending', 0, ${at}, errors`,
          }),
        d.moveRunOptions,
      );
      total += moved.length;
      if (moved.length < ID_BATCH) return total;
    }
  }

  /** Deletes dead letters (and events nothing refers to any more), `ID_BATCH` at a time. */
  async purge(selector: DeadLetterSelector): Promise<number> {
    const where = this.selectorWhere(selector);
    if (!where) return 0;
    const { DL } = this;
    const orphans = this.deleteOrphans.bind(this);
    let total = 0;
    for (;;) {
      const { read, purged } = await this.dialect.run(
        function* (): Plan<{ read: number; purged: number }> {
          const { rows } =
            yield sql`SELECT id, event_seq FROM ${DL} WHERE ${where} ORDER BY id LIMIT ${raw(String(ID_BATCH))}`;
          if (rows.length === 0) return { read: 0, purged: 0 };
          // The selector is checked again by the delete (a row replayed meanwhile is not here).
          const { affected } =
            yield sql`DELETE FROM ${DL} WHERE id IN (${list(rows.map((r) => r.id))}) AND ${where}`;
          yield* orphans(rows.map((r) => Number(r.event_seq)));
          return { read: rows.length, purged: affected };
        },
        { transaction: true, deadlockRetries: 3 },
      );
      total += purged;
      if (read < ID_BATCH) return total;
    }
  }

  /**
   * Deletes the events among `seqs` that no delivery or dead letter refers to any more. The
   * condition is checked by the deleting statement itself, so an event whose dead letter was
   * replayed a moment ago (its delivery is open again) stays.
   */
  private *deleteOrphans(seqs: number[], olderThan?: SqlText): Plan<number> {
    const unique = [...new Set(seqs)];
    let deleted = 0;
    for (let i = 0; i < unique.length; i += ID_BATCH) {
      const some = list(unique.slice(i, i + ID_BATCH));
      const age = olderThan ? sql` AND available_at < ${olderThan}` : EMPTY;
      const { affected } =
        yield sql`DELETE FROM ${this.E} WHERE seq IN (${some}) AND NOT EXISTS (SELECT 1 FROM ${this.D} x WHERE x.event_seq = ${this.E}.seq) AND NOT EXISTS (SELECT 1 FROM ${this.DL} y WHERE y.event_seq = ${this.E}.seq)${age}`;
      deleted += affected;
    }
    return deleted;
  }

  // ---------------------------------------------------------------- stats and cleanup

  async stats(): Promise<OutboxStoreStats> {
    const d = this.dialect;
    const due = sql`d.status = 'pending' AND d.available_at <= ${d.now}`;
    const { D, DL } = this;
    const [nowRows, rows, dead] = await d.run(function* (): Plan<[Row[], Row[], Row[]]> {
      const now = yield sql`SELECT ${d.timeOut(d.now)} AS now`;
      const groups =
        yield sql`SELECT d.event_type, d.status, COUNT(*) AS n, SUM(CASE WHEN ${due} THEN 1 ELSE 0 END) AS due, ${d.timeOut(sql`MIN(CASE WHEN ${due} THEN d.available_at END)`)} AS oldest FROM ${D} d GROUP BY d.event_type, d.status`;
      const deadGroups = yield sql`SELECT event_type, COUNT(*) AS n FROM ${DL} GROUP BY event_type`;
      return [now.rows, groups.rows, deadGroups.rows];
    });
    const now = d.readTime(nowRows[0]?.now).getTime();
    const stats: OutboxStoreStats = {
      pending: 0,
      due: 0,
      leased: 0,
      dead: 0,
      oldestPendingAgeMs: 0,
      byType: {},
    };
    const of = (type: unknown) =>
      (stats.byType[String(type)] ??= { pending: 0, leased: 0, dead: 0 });
    for (const r of dead) {
      const n = Number(r.n);
      of(r.event_type).dead += n;
      stats.dead += n;
    }
    for (const r of rows) {
      const n = Number(r.n);
      const status = String(r.status) as 'pending' | 'leased';
      if (status !== 'pending' && status !== 'leased') continue;
      of(r.event_type)[status] += n;
      stats[status] += n;
      if (status === 'pending') {
        stats.due += Number(r.due ?? 0);
        if (r.oldest !== null && r.oldest !== undefined) {
          stats.oldestPendingAgeMs = Math.max(
            stats.oldestPendingAgeMs,
            now - d.readTime(r.oldest).getTime(),
          );
        }
      }
    }
    return stats;
  }

  /**
   * One bounded batch of each kind in one short transaction (the dispatcher's cleanup job calls
   * again while batches come back full). Reads go through indexes on the retention clocks
   * (`dead_at`, `available_at`): a run costs what it deletes, not the history it keeps.
   */
  async cleanup(options: CleanupOptions): Promise<CleanupResult> {
    const size = Math.max(1, Math.floor(options.batchSize));
    return (await this.cleanupBatch(options, size)) ?? { events: 0, deadLetters: 0 };
  }

  /** One batch; `null` when another runner holds the cleanup lock. */
  private cleanupBatch(options: CleanupOptions, size: number): Promise<CleanupResult | null> {
    const d = this.dialect;
    const { DL, E } = this;
    const orphans = this.deleteOrphans.bind(this);
    const lockName = `${d.tables.lockName}:cleanup`;
    const batch = raw(String(size));
    return d.run(
      function* (): Plan<CleanupResult | null> {
        // One runner at a time: others skip this round instead of queueing on the same rows.
        const { rows: locked } = yield d.tryLock(lockName);
        if (!isTruthy(locked[0]?.ok)) return null;
        const unlock = d.unlock(lockName);
        try {
          const result: CleanupResult = { events: 0, deadLetters: 0 };
          if (options.deadLetterRetentionMs !== null) {
            const cutoff = d.plusMs(d.now, -options.deadLetterRetentionMs);
            const { rows } =
              yield sql`SELECT id, event_seq FROM ${DL} WHERE dead_at < ${cutoff} ORDER BY dead_at LIMIT ${batch}`;
            if (rows.length > 0) {
              // The age is checked again by the delete: a row replayed meanwhile is gone from
              // here, and one purged meanwhile is not counted twice.
              const { affected } =
                yield sql`DELETE FROM ${DL} WHERE id IN (${list(rows.map((r) => r.id))}) AND dead_at < ${cutoff}`;
              yield* orphans(rows.map((r) => Number(r.event_seq)));
              result.deadLetters = affected;
            }
          }
          const cutoff = d.plusMs(d.now, -options.deliveredRetentionMs);
          const { rows } =
            yield sql`SELECT e.seq FROM ${E} e WHERE e.available_at < ${cutoff} AND NOT EXISTS (SELECT 1 FROM ${d.tables.deliveries} x WHERE x.event_seq = e.seq) AND NOT EXISTS (SELECT 1 FROM ${DL} y WHERE y.event_seq = e.seq) ORDER BY e.available_at LIMIT ${batch}`;
          if (rows.length > 0) {
            result.events = yield* orphans(
              rows.map((r) => Number(r.seq)),
              cutoff,
            );
          }
          return result;
        } finally {
          if (unlock) yield unlock;
        }
      },
      { transaction: true, deadlockRetries: 3 },
    );
  }

  // ---------------------------------------------------------------- rows

  private eventColumns(e: string): SqlText {
    const d = this.dialect;
    const c = (name: string) => raw(`${e}.${name}`);
    return sql`${c('id')} AS event_id, ${c('type')} AS type, ${c('event_key')} AS event_key, ${d.jsonOut(c('payload'))} AS payload, ${d.jsonOut(c('headers'))} AS headers, ${d.timeOut(c('occurred_at'))} AS occurred_at, ${d.timeOut(c('available_at'))} AS available_at`;
  }

  private toEvent(r: Row): OutboxEvent {
    return {
      id: String(r.event_id),
      type: String(r.type),
      payload: JSON.parse(String(r.payload)),
      key: r.event_key === null || r.event_key === undefined ? null : String(r.event_key),
      headers: JSON.parse(String(r.headers)) as Record<string, string>,
      occurredAt: this.dialect.readTime(r.occurred_at),
      availableAt: this.dialect.readTime(r.available_at),
    };
  }
}

/**
 * Error text without NUL characters: PostgreSQL text and jsonb cannot hold U+0000 (the whole
 * statement would fail and the outcome would be lost); stripped on every dialect alike.
 */
function withoutNul(value: unknown): string {
  return String(value).replaceAll('\u0000', '');
}

/** Longest retry delay written (100 years); beyond it the databases' date arithmetic overflows. */
const MAX_RETRY_DELAY_MS = 100 * 365 * 86_400_000;

/** A retry delay the database accepts: NaN, infinite or negative delays mean "now". */
function retryDelay(delayMs: number): number {
  const ms = Number(delayMs);
  return Number.isFinite(ms) && ms > 0 ? Math.min(ms, MAX_RETRY_DELAY_MS) : 0;
}

function isTruthy(value: unknown): boolean {
  return value === true || value === 1 || value === '1' || value === 't' || value === 1n;
}

function parseErrors(value: unknown): DeliveryError[] {
  const list = (typeof value === 'string' ? JSON.parse(value) : (value ?? [])) as Array<
    Record<string, unknown>
  >;
  return list.map((e) => ({
    name: String(e.name),
    message: String(e.message),
    attempt: Number(e.attempt),
    workerId: String(e.workerId),
    at: new Date(Number(e.at)),
  }));
}

/** One event per id; the same id twice in a batch must carry the same content. */
function dedupeBatch(events: AppendableEvent[]): AppendableEvent[] {
  const byId = new Map<string, AppendableEvent>();
  for (const event of events) {
    const seen = byId.get(event.id.toLowerCase());
    if (seen && !sameEventContent(seen, event)) throw new DuplicateEventError(event.id);
    if (!seen) byId.set(event.id.toLowerCase(), event);
  }
  return [...byId.values()];
}

function orderLike(input: AppendableEvent[], stored: OutboxEvent[]): OutboxEvent[] {
  const byId = new Map(stored.map((e) => [e.id.toLowerCase(), e]));
  return input.map((e) => byId.get(e.id.toLowerCase())!);
}

function toAppendRow(e: AppendableEvent): AppendRow {
  const handlers = e.handlers.length > 0 ? [...new Set(e.handlers)] : [UNEXPANDED_HANDLER];
  return {
    id: e.id,
    type: e.type,
    key: e.key,
    payload: JSON.stringify(e.payload),
    headers: JSON.stringify(e.headers ?? {}),
    occurredAt: e.occurredAt,
    availableAt: e.availableAt,
    deliveries: handlers.map((handler) => ({ id: randomUUID(), handler })),
  };
}

/** Splits rows so one INSERT stays under the dialect's statement size (MySQL packets). */
function chunkBySize(rows: AppendRow[], maxBytes: number): AppendRow[][] {
  const chunks: AppendRow[][] = [];
  let current: AppendRow[] = [];
  let size = 0;
  for (const row of rows) {
    const bytes =
      Buffer.byteLength(row.payload, 'utf8') + Buffer.byteLength(row.headers, 'utf8') + 512;
    if (current.length > 0 && (size + bytes > maxBytes || current.length >= EVENTS_PER_INSERT)) {
      chunks.push(current);
      current = [];
      size = 0;
    }
    current.push(row);
    size += bytes;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
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
