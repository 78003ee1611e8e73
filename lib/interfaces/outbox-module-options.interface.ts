import type { OutboxStore } from './outbox-store.interface';
import type { TypeOrmStoreOptions } from '../stores/typeorm/typeorm-store.options';
import type { RedisStoreOptions } from '../stores/redis/redis-store.options';
import type { SqlStoreOptions } from '../stores/sql/sql-store.options';
import type { OutboxInboxOptions, ResolvedInboxOptions } from '../inbox/inbox-options.interface';
import type {
  OutboxMetricsOptions,
  ResolvedObservabilityOptions,
} from '../observability/observability-options.interface';

/** In-process store for unit tests and single-process experiments. */
export interface MemoryStoreOptions {
  type: 'memory';
  /** The memory store refuses `NODE_ENV=production` unless this is true. @default false */
  allowInProduction?: boolean;
  /** Store clock, injectable for tests. @default () => new Date() */
  clock?: () => Date;
}

/** Bring your own `OutboxStore` implementation (check it with the contract suite). */
export interface CustomStoreOptions {
  type: 'custom';
  store: OutboxStore;
}

export type OutboxStoreOptions =
  | MemoryStoreOptions
  | CustomStoreOptions
  | TypeOrmStoreOptions
  | SqlStoreOptions
  | RedisStoreOptions;

export interface BackoffOptions {
  /** Delay after the first failed attempt. @default 1000 */
  initialMs?: number;
  /** Multiplier per further attempt. @default 2 */
  factor?: number;
  /** Cap on the delay. @default 300000 (5 min) */
  maxMs?: number;
  /** Random spread as a fraction of the delay (0–1): delay × (1 ± jitter). @default 0.2 */
  jitter?: number;
}

export interface OutboxDispatcherOptions {
  /** Run the dispatcher in this process. API-only processes set false. @default true */
  enabled?: boolean;
  /** Stable unique worker id. @default `${hostname}-${pid}-${random}` */
  workerId?: string;
  /**
   * Milliseconds between polls when idle. With wake-ups (PostgreSQL, Redis) the poll only picks
   * up retries and scheduled events that came due and signals that were lost; on MySQL/MariaDB
   * it is how a worker learns of other processes' appends. @default 500
   */
  pollInterval?: number;
  /**
   * Wake-ups across processes (docs/wakeups.md): after appends commit, this process signals
   * other processes (PostgreSQL `NOTIFY`, Redis `PUBLISH`; at most one per 5 ms, outside the
   * producer's transaction), and its dispatcher listens on one dedicated connection and claims
   * as soon as a signal arrives. Costs one extra connection per dispatcher and one short
   * statement per 5 ms of appends. Ignored by stores without a channel (MySQL/MariaDB, SQLite,
   * memory), which rely on `pollInterval` and this process's own commits. @default true
   */
  wakeups?: boolean;
  /**
   * Maximum deliveries claimed per poll; one batch is also claimed ahead of free slots, so a
   * slot that frees starts its next delivery without a round trip. @default 100
   */
  batchSize?: number;
  /** Maximum handlers running at once in this process. @default 50 */
  concurrency?: number;
  /** Lease length; renewed every leaseMs/3 while a handler runs. @default 30000 */
  leaseMs?: number;
  /** A handler running longer fails its attempt and its signal aborts. @default 60000 */
  handlerTimeoutMs?: number;
  /** Attempts before a delivery is dead-lettered with reason `exhausted`. @default 10 */
  maxAttempts?: number;
  backoff?: BackoffOptions;
  /** How long shutdown waits for in-flight handlers. @default 10000 */
  shutdownTimeoutMs?: number;
  /** Back-off after a store error: starts here, doubles, capped at `storeErrorMaxBackoffMs`. @default 1000 */
  storeErrorBackoffMs?: number;
  /** @default 30000 */
  storeErrorMaxBackoffMs?: number;
}

/** Validation limits (docs/guarantees.md, Limits). */
export interface OutboxLimits {
  /** @default 255 */
  typeMaxLength: number;
  /** @default 512 */
  keyMaxLength: number;
  /** Serialized JSON payload size in bytes. @default 1048576 (1 MiB) */
  payloadMaxBytes: number;
  /** @default 64 */
  headersMaxCount: number;
  /** @default 128 */
  headerNameMaxLength: number;
  /** @default 1024 */
  headerValueMaxLength: number;
  /** Stored error text per failure. @default 4096 */
  errorMaxLength: number;
  /** Events per `append()` call. @default 1000 */
  appendMaxEvents: number;
}

export interface OutboxRetentionOptions {
  /** Keep fully delivered events this long. @default 86400000 (1 day) */
  deliveredMs?: number;
  /** Keep dead letters this long; `null` keeps them until purged. @default 2592000000 (30 days) */
  deadLetterMs?: number | null;
  /** How often the cleanup job runs (in dispatcher processes). 0 disables it. @default 60000 */
  cleanupIntervalMs?: number;
  /** Rows deleted per kind per run. @default 1000 */
  batchSize?: number;
}

/** How much of a failure's stack is stored with its message (docs/admin.md, Error stacks). */
export interface OutboxErrorStackOptions {
  /** Lines of `error.stack` kept, its first line (name and message) included. @default 10 */
  lines?: number;
  /** Characters kept at most, after the lines are taken. @default 2048 */
  maxLength?: number;
}

export interface OutboxModuleOptions {
  /** Which store persists events. */
  store: OutboxStoreOptions;
  dispatcher?: OutboxDispatcherOptions;
  limits?: Partial<OutboxLimits>;
  retention?: OutboxRetentionOptions;
  /**
   * Where `@Inbox()` consumers record processed messages.
   * @default the 'typeorm' store's DataSource, or the 'sql' store's executor
   */
  inbox?: OutboxInboxOptions;
  /**
   * Log lines built on the event stream (docs/monitoring.md), through Nest's `Logger`: dead
   * letters (error), lease losses, retries and store errors (warn), claims (debug). @default true
   */
  logs?: boolean;
  /**
   * Prometheus metrics (optional peer `prom-client`): `true` registers them in prom-client's
   * default registry, or give `{ registry }`. @default false
   */
  metrics?: boolean | OutboxMetricsOptions;
  /**
   * OpenTelemetry (optional peer `@opentelemetry/api`): `append` records the active trace context
   * in the event headers, handlers run in a consumer span continuing it, `@Inbox()` consumers
   * continue traces from message headers. @default false
   */
  tracing?: boolean;
  /**
   * Store the first lines of each failure's stack in the delivery's error history (dead letters,
   * the admin API): `false` stores none, `true` or an object stores the first `lines` lines,
   * at most `maxLength` characters. @default { lines: 10, maxLength: 2048 }
   */
  errorStacks?: boolean | OutboxErrorStackOptions;
}

/** Options after defaults are applied and validated. */
export interface ResolvedOutboxOptions {
  store: OutboxStoreOptions;
  dispatcher: Required<Omit<OutboxDispatcherOptions, 'backoff'>> & {
    backoff: Required<BackoffOptions>;
  };
  limits: OutboxLimits;
  retention: Required<OutboxRetentionOptions>;
  /** `null` when there is no module-level inbox (per-decorator DataSources still work). */
  inbox: ResolvedInboxOptions | null;
  /** Absent (options resolved by hand): logs on, metrics and tracing off. */
  observability?: ResolvedObservabilityOptions;
  /** `null`: no stacks stored. Absent (options resolved by hand): the defaults. */
  errorStacks?: Required<OutboxErrorStackOptions> | null;
}
