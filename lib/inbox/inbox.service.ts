import {
  BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  OnApplicationBootstrap,
  OnApplicationShutdown,
  OnModuleInit,
  Optional,
} from '@nestjs/common';
import { DiscoveryService, MetadataScanner, ModuleRef, Reflector } from '@nestjs/core';
import { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper';
import type { SchedulerRegistry } from '@nestjs/schedule';
import type { DataSource, EntityManager } from 'typeorm';
import { IdempotencyKeyReusedError } from '../errors/idempotency-key-reused.error';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { AmbientTransactions } from '../ambient-transaction';
import { OUTBOX_HANDLER_METADATA, OUTBOX_STORE } from '../outbox.constants';
import type { OutboxStore } from '../interfaces/outbox-store.interface';
import { DeferredOutboxStore } from '../stores/deferred-outbox.store';
import { inboxMethodsOf } from './inbox-alongside';
import { OptionKeys, refuseUnknownKeys } from '../option-fields';
import { isSqlExecutor, SqlExecutor } from '../executors/sql-executor';
import {
  INBOX_CLEANUP_INTERVAL,
  INBOX_MANAGER_PARAMS_METADATA,
  INBOX_RESOLVED_OPTIONS,
  INBOX_TX_PARAMS_METADATA,
} from './inbox.constants';
import { InboxMessages } from './inbox.messages';
import { normalizeKey, MissingMessageId } from './inbox-message-id';
import {
  DEFAULT_INBOX_RETENTION_MS,
  isIsolationLevel,
  MAX_LOCK_TIMEOUT_MS,
  refuseExecutorWith,
} from './inbox-options';
import {
  InboxIsolationLevel,
  InboxOptions,
  InboxStats,
  ResolvedInboxOptions,
} from './inbox-options.interface';
import { InboxCleanupResult, InboxRunResult, InboxStore } from './inbox.store';
import { OUTBOX_TRACING } from '../observability/observability.constants';
import { OutboxEvents } from '../observability/outbox-events';

/** What `@Inbox()` needs of the tracing integration (typed without `@opentelemetry/api`). */
export interface InboxTracing {
  continueFrom<T>(headers: object | undefined, consumer: string, run: () => Promise<T>): Promise<T>;
}

const DEFAULT_KEY = Symbol('default inbox DataSource');

const INBOX_DECORATOR_KEYS = {
  messageId: true,
  consumer: true,
  duplicateResult: true,
  dataSource: true,
  executor: true,
  isolationLevel: true,
  lockTimeoutMs: true,
  noAck: true,
  scope: true,
  fingerprint: true,
} satisfies OptionKeys<InboxOptions>;

/** Where a consumer's inbox runs: a TypeORM DataSource, or another client's executor. */
type InboxSource = DataSource | SqlExecutor;

/**
 * Runs `@Inbox()` consumers: resolves their DataSources or executors, creates the table where
 * allowed, counts outcomes and runs the retention job.
 */
@Injectable()
export class InboxService
  implements OnModuleInit, OnApplicationBootstrap, BeforeApplicationShutdown, OnApplicationShutdown
{
  private readonly logger = new Logger('OutboxInbox');
  private readonly stores = new Map<unknown, Promise<InboxStore>>();
  private readonly bySource = new Map<InboxSource, Promise<InboxStore>>();
  private readonly counters: InboxStats = {
    processed: 0,
    duplicates: 0,
    failed: 0,
    transientRetries: 0,
    cleanupDeleted: 0,
    cleanupSkipped: 0,
  };
  private cleanupTimer: NodeJS.Timeout | null = null;
  private scheduler: SchedulerRegistry | null = null;
  private cleaning: Promise<unknown> | null = null;
  private readonly ambient: AmbientTransactions;

  constructor(
    @Inject(INBOX_RESOLVED_OPTIONS) private readonly config: ResolvedInboxOptions | null,
    private readonly moduleRef: ModuleRef,
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
    @Optional() private readonly events: OutboxEvents = new OutboxEvents(),
    /** Read by `@Inbox()` to continue traces from message headers (the `tracing` option). */
    @Optional() @Inject(OUTBOX_TRACING) readonly tracing: InboxTracing | null = null,
    /** OutboxModule's store, opened beside this service's tables at bootstrap. */
    @Optional() @Inject(OUTBOX_STORE) private readonly outboxStore: OutboxStore | null = null,
  ) {
    this.ambient = new AmbientTransactions(moduleRef);
  }

  /** Validates every `@Inbox()` method and prepares its table before anything is delivered. */
  async onModuleInit(): Promise<void> {
    const pending: Promise<InboxStore>[] = [];
    for (const wrapper of [...this.discovery.getControllers(), ...this.discovery.getProviders()]) {
      for (const { where, method, options } of this.inboxMethods(wrapper)) {
        this.validate(where, method, options);
        pending.push(this.storeFor(options.executor ?? options.dataSource, where));
      }
    }
    // The inbox that follows the TypeORM store exists only for apps that use it: an app without
    // @Inbox() gets no table and no cleanup job (unless options.inbox asks for them).
    if (this.config && (this.config.explicit || pending.length > 0)) {
      pending.push(this.storeFor(undefined, 'OutboxModule inbox'));
    }
    await Promise.all(pending).catch(async (error: unknown) => {
      // OutboxModule opens its store at the same time. When both fail, report the outbox's error:
      // with the inbox table beside the outbox tables it names the command that fixes both. Only
      // an attempt already made is awaited: a failed one is not made again here.
      if (this.outboxStore instanceof DeferredOutboxStore) await this.outboxStore.lastAttempt();
      throw error;
    });
  }

  onApplicationBootstrap(): void {
    const interval = this.config?.cleanupIntervalMs ?? 60_000;
    if (interval === 0 || this.bySource.size === 0) return;
    this.cleanupTimer = setInterval(() => void this.cleanup().catch(() => undefined), interval);
    this.cleanupTimer.unref();
    this.scheduler = this.resolveScheduler();
    this.scheduler?.addInterval(INBOX_CLEANUP_INTERVAL, this.cleanupTimer);
  }

  async beforeApplicationShutdown(): Promise<void> {
    if (this.cleanupTimer) {
      clearInterval(this.cleanupTimer);
      if (this.scheduler?.doesExist('interval', INBOX_CLEANUP_INTERVAL)) {
        this.scheduler.deleteInterval(INBOX_CLEANUP_INTERVAL);
      }
      this.cleanupTimer = null;
    }
    await this.cleaning;
  }

  /**
   * Ends what the consumers' executors opened themselves (the Prisma MariaDB executor's pool),
   * never the caller's client: after the app's servers and microservices have stopped, so no
   * message is being applied.
   */
  async onApplicationShutdown(): Promise<void> {
    const executors = [...this.bySource.keys()].filter(isSqlExecutor);
    await Promise.all(executors.map((executor) => executor.close?.().catch(() => undefined)));
  }

  /** Counters since the process started. */
  stats(): InboxStats {
    return { ...this.counters };
  }

  /**
   * Runs `work` once per `(consumer, messageId)` in an inbox transaction on the consumer's
   * DataSource or executor (see `@Inbox()`); used by the interceptor, callable directly for custom
   * consumers. `work` gets the transaction object of the inbox's client (`Tx`: TypeORM's
   * EntityManager by default; node-postgres' PoolClient, Drizzle's `tx`, Kysely's `Transaction`)
   * and that client's name (`TypeORM`, `node-postgres`, …).
   */
  async run<T, Tx = EntityManager>(
    key: { consumer: string; messageId: string },
    work: (tx: Tx, client: string) => Promise<T>,
    options: Pick<InboxOptions, 'dataSource' | 'executor' | 'isolationLevel' | 'lockTimeoutMs'> & {
      fingerprint?: string;
    } = {},
  ): Promise<InboxRunResult<T>> {
    const store = await this.storeFor(options.executor ?? options.dataSource, key.consumer);
    const { executor } = store;
    try {
      const result = await store.run(
        key.consumer,
        key.messageId,
        (tx: Tx) => this.ambient.runAsAmbient(tx, executor, () => work(tx, executor.client)),
        {
          isolationLevel: options.isolationLevel ?? this.config?.isolationLevel,
          lockTimeoutMs: options.lockTimeoutMs ?? this.config?.lockTimeoutMs,
          fingerprint: options.fingerprint,
          onTransientRetry: () => this.counters.transientRetries++,
        },
      );
      if (result.duplicate) {
        this.counters.duplicates++;
        this.logger.debug(InboxMessages.duplicate(key.consumer, key.messageId));
      } else {
        this.counters.processed++;
      }
      const kind = result.duplicate ? 'inbox-duplicate' : 'inbox-processed';
      if (this.events.wants(kind)) this.events.emit({ kind, ...key });
      return result;
    } catch (error) {
      if (!(error instanceof IdempotencyKeyReusedError)) {
        this.counters.failed++;
        if (this.events.wants('inbox-failed')) this.events.emit({ kind: 'inbox-failed', ...key });
      }
      throw error;
    }
  }

  /** One retention pass over every inbox table this process uses. */
  async cleanup(): Promise<InboxCleanupResult[]> {
    const run = (async () => {
      const results: InboxCleanupResult[] = [];
      for (const pending of this.bySource.values()) {
        const store = await pending.catch(() => null);
        if (!store) continue;
        try {
          const result = await store.cleanup(
            this.config?.retentionMs ?? DEFAULT_INBOX_RETENTION_MS,
            this.config?.cleanupBatchSize ?? 1_000,
          );
          results.push(result);
          this.counters.cleanupDeleted += result.deleted;
          if (result.skipped) {
            this.counters.cleanupSkipped++;
            this.logger.debug(InboxMessages.cleanupSkipped(store.names.plain));
          } else if (result.deleted > 0) {
            this.logger.debug(
              InboxMessages.cleanupDone(store.names.plain, result.deleted, result.batches),
            );
          }
        } catch (error) {
          this.logger.warn(InboxMessages.cleanupFailed(store.names.plain, error));
          throw error;
        }
      }
      return results;
    })();
    this.cleaning = run.catch(() => undefined);
    return run;
  }

  /**
   * The inbox store of a consumer's DataSource or executor (the module default when none is
   * given).
   */
  storeFor(
    source: InboxOptions['dataSource'] | SqlExecutor | undefined,
    where: string,
  ): Promise<InboxStore> {
    const key = source ?? DEFAULT_KEY;
    const known = this.stores.get(key);
    if (known) return known;
    let instance: InboxSource;
    try {
      instance = isSqlExecutor(source) ? source : this.resolveSource(source, where);
    } catch (error) {
      // Not cached, so every later call reports the configuration error again.
      return Promise.reject(error);
    }
    // Two tokens may name one DataSource: they share one store (and SQLite's transaction queue).
    let store = this.bySource.get(instance);
    if (!store) {
      store = this.prepare(instance);
      this.bySource.set(instance, store);
      store.catch(() => this.bySource.delete(instance));
    }
    this.stores.set(key, store);
    store.catch(() => this.stores.delete(key));
    return store;
  }

  private async prepare(source: InboxSource): Promise<InboxStore> {
    const store = new InboxStore(source, {
      tablePrefix: this.config?.tablePrefix,
      schema: this.config?.schema,
    });
    if (this.config?.ensureSchema ?? process.env.NODE_ENV !== 'production') {
      await store.ensureSchema();
    } else {
      await store.assertSchema(this.config?.module);
    }
    return store;
  }

  private resolveSource(dataSource: InboxOptions['dataSource'], where: string): InboxSource {
    let value: unknown = dataSource;
    if (value === undefined) {
      if (!this.config) throw new OutboxOptionsError('inbox', InboxMessages.notConfigured(where));
      if (this.config.executor) return this.config.executor;
      // The default connection of @nestjs/typeorm is registered under the DataSource class.
      value =
        this.config.dataSource ??
        this.config.dataSourceToken ??
        (require('typeorm') as typeof import('typeorm')).DataSource;
    }
    // The module's DataSource given to InboxModule.forRoot: name that module and its option.
    const refuse = (reason: string) =>
      dataSource === undefined && this.config?.module === 'InboxModule'
        ? new OutboxOptionsError(
            this.config.dataSourceToken !== undefined ? 'dataSourceToken' : 'dataSource',
            reason,
            'InboxModule',
          )
        : new OutboxOptionsError('inbox.dataSource', reason);
    if (!isDataSource(value)) {
      const token = value;
      try {
        value = this.moduleRef.get(token as string, { strict: false });
      } catch {
        throw refuse(InboxMessages.dataSourceNotFound(where, token));
      }
      if (!isDataSource(value)) throw refuse(InboxMessages.notADataSource(where));
    }
    if (!value.isInitialized) throw refuse(InboxMessages.notInitialized(where));
    return value;
  }

  private *inboxMethods(wrapper: InstanceWrapper) {
    const { instance } = wrapper;
    if (!instance || typeof instance !== 'object') return;
    const prototype = Object.getPrototypeOf(instance);
    if (!prototype) return;
    for (const { name, method, options } of inboxMethodsOf(
      prototype,
      this.scanner,
      this.reflector,
    )) {
      yield { where: `${instance.constructor.name}.${name}`, method, options };
    }
  }

  private validate(where: string, method: object, options: InboxOptions): void {
    const refuse = (field: string, reason: string) =>
      new OutboxOptionsError(`@Inbox ${field}`, `${reason} (on ${where})`);
    if (typeof options !== 'object' || options === null) {
      throw refuse('options', `expected an object, got ${JSON.stringify(options)}`);
    }
    refuseUnknownKeys('', options, INBOX_DECORATOR_KEYS, refuse);
    if (options.executor !== undefined) {
      refuseExecutorWith(options, '@Inbox', (field, reason) =>
        refuse(field.slice('@Inbox.'.length), reason),
      );
      if (!isSqlExecutor(options.executor)) {
        throw new OutboxOptionsError('@Inbox executor', InboxMessages.notAnExecutor(where));
      }
    }
    if (options.consumer !== undefined) {
      const consumer = normalizeKey(options.consumer, 'consumer');
      if (consumer instanceof MissingMessageId) {
        throw new OutboxOptionsError(
          '@Inbox consumer',
          InboxMessages.badConsumer(where, consumer.reason),
        );
      }
    }
    if (options.isolationLevel !== undefined && !isIsolationLevel(options.isolationLevel)) {
      throw new OutboxOptionsError(
        '@Inbox isolationLevel',
        InboxMessages.badIsolationLevel(where, options.isolationLevel as InboxIsolationLevel),
      );
    }
    const lockTimeoutMs = options.lockTimeoutMs as unknown;
    if (
      lockTimeoutMs !== undefined &&
      !(
        Number.isSafeInteger(lockTimeoutMs) &&
        (lockTimeoutMs as number) >= 1 &&
        (lockTimeoutMs as number) <= MAX_LOCK_TIMEOUT_MS
      )
    ) {
      throw new OutboxOptionsError(
        '@Inbox lockTimeoutMs',
        InboxMessages.badLockTimeout(where, lockTimeoutMs),
      );
    }
    if (options.noAck !== undefined && typeof options.noAck !== 'boolean') {
      throw new OutboxOptionsError('@Inbox noAck', InboxMessages.badNoAck(where));
    }
    if (options.scope !== undefined && typeof options.scope !== 'function') {
      throw new OutboxOptionsError('@Inbox scope', InboxMessages.badHook(where, 'scope'));
    }
    if (
      options.fingerprint !== undefined &&
      options.fingerprint !== false &&
      typeof options.fingerprint !== 'function'
    ) {
      throw new OutboxOptionsError(
        '@Inbox fingerprint',
        InboxMessages.badHook(where, 'fingerprint'),
      );
    }
    const source = options.messageId as unknown;
    const validSource =
      source === undefined ||
      typeof source === 'function' ||
      (typeof source === 'object' &&
        source !== null &&
        (typeof (source as { header?: unknown }).header === 'string' ||
          typeof (source as { path?: unknown }).path === 'string'));
    if (!validSource) {
      throw new OutboxOptionsError('@Inbox messageId', InboxMessages.badMessageIdSource(where));
    }
    if (typeof source === 'object' && source !== null) {
      const keys: Record<string, true> = 'header' in source ? { header: true } : { path: true };
      refuseUnknownKeys('messageId', source, keys, refuse);
    }
    const managerParams = Reflect.getMetadata(INBOX_MANAGER_PARAMS_METADATA, method) as
      number[] | undefined;
    const txParams = Reflect.getMetadata(INBOX_TX_PARAMS_METADATA, method) as number[] | undefined;
    if (this.reflector.get(OUTBOX_HANDLER_METADATA, method as never)) {
      if (managerParams?.length) {
        throw new OutboxOptionsError('@InboxManager', InboxMessages.managerOnOutboxHandler(where));
      }
      if (txParams?.length) {
        throw new OutboxOptionsError('@InboxTx', InboxMessages.txOnOutboxHandler(where));
      }
    }
  }

  private resolveScheduler(): SchedulerRegistry | null {
    try {
      const { SchedulerRegistry } =
        require('@nestjs/schedule') as typeof import('@nestjs/schedule');
      return this.moduleRef.get(SchedulerRegistry, { strict: false });
    } catch {
      // Without @nestjs/schedule the job still runs on its own timer; it is just not listed.
      return null;
    }
  }
}

function isDataSource(value: unknown): value is DataSource {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as DataSource).createQueryRunner === 'function' &&
    typeof (value as DataSource).options === 'object'
  );
}
