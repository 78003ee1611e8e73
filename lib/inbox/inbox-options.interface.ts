import type { ExecutionContext } from '@nestjs/common';
import type { SqlExecutor } from '../executors/sql-executor';

/** Transaction isolation of the inbox transaction (what TypeORM accepts). */
export type InboxIsolationLevel =
  'READ UNCOMMITTED' | 'READ COMMITTED' | 'REPEATABLE READ' | 'SERIALIZABLE';

/** A Nest injection token of a TypeORM DataSource, e.g. `getDataSourceToken('orders')`. */
// `Function` because @nestjs/typeorm's getDataSourceToken() is typed `string | Function | Type<DataSource>`.
export type InboxDataSourceToken = string | symbol | Function;

/** `OutboxModule.forRoot({ inbox })`: where and how inbox records are kept. */
export interface OutboxInboxOptions {
  /**
   * The TypeORM `DataSource` holding the inbox table; your handlers' writes must go to the same
   * database to be atomic with it. @default the TypeORM store's DataSource when `store.type` is `'typeorm'`
   */
  dataSource?: unknown;
  /** Injection token of that DataSource (e.g. `getDataSourceToken()` from `@nestjs/typeorm`). */
  dataSourceToken?: InboxDataSourceToken;
  /**
   * The executor of another client holding the inbox table (`pgExecutor(pool)`,
   * `drizzleExecutor(db)`, `kyselyExecutor(db)`); consumers write through its transaction object
   * (`@InboxTx()`). Not together with `dataSource` / `dataSourceToken`.
   * @default the 'sql' store's executor when `store.type` is `'sql'`
   */
  executor?: SqlExecutor;
  /**
   * How long a processed message is remembered. Must exceed the longest time a duplicate can still
   * arrive: the broker's or dispatcher's whole retry span plus your replay window.
   * @default 604800000 (7 days)
   */
  retentionMs?: number;
  /** How often the retention job runs in this process; 0 disables it. @default 60000 */
  cleanupIntervalMs?: number;
  /** Records deleted per statement by the retention job. @default 1000 */
  cleanupBatchSize?: number;
  /** Isolation of the inbox transaction. @default the database's (READ COMMITTED on PostgreSQL, REPEATABLE READ on MySQL) */
  isolationLevel?: InboxIsolationLevel;
  /**
   * How long a delivery waits for a concurrent delivery of the same message to finish before it
   * fails with `InboxInProgressError` (HTTP 409) and gives its connection back. MySQL rounds up to
   * whole seconds. @default 5000
   */
  lockTimeoutMs?: number;
  /** The table is `${tablePrefix}inbox`. @default 'outbox_' */
  tablePrefix?: string;
  /** PostgreSQL schema (or MySQL database) of the table. @default the connection's */
  schema?: string;
  /** Create the table on first use if missing. @default true unless NODE_ENV is 'production' */
  ensureSchema?: boolean;
}

/** Module-level inbox options after defaults and validation. */
export interface ResolvedInboxOptions {
  /** True when `options.inbox` was given (not only inherited from the TypeORM store). */
  explicit: boolean;
  /** Set when given to `InboxModule.forRoot`: errors name InboxModule and the option as written. */
  module?: 'InboxModule';
  dataSource?: unknown;
  dataSourceToken?: InboxDataSourceToken;
  executor?: SqlExecutor;
  retentionMs: number;
  cleanupIntervalMs: number;
  cleanupBatchSize: number;
  isolationLevel?: InboxIsolationLevel;
  lockTimeoutMs: number;
  tablePrefix: string;
  schema?: string;
  ensureSchema: boolean;
}

/** Reads the message id from the execution context. Return `undefined` when there is none. */
export type InboxMessageIdExtractor = (context: ExecutionContext) => unknown;

/**
 * Where a consumer's message id comes from:
 * - `{ header: name }` – an HTTP request header, or a transport header of a microservice message
 *   (NATS headers, RabbitMQ properties/headers, Kafka headers, MQTT user properties);
 * - `{ path: 'meta.id' }` – a dotted path into the HTTP body or the microservice payload;
 * - a function `(context: ExecutionContext) => string`.
 */
export type InboxMessageIdSource = { header: string } | { path: string } | InboxMessageIdExtractor;

/** `@Inbox(options)` */
export interface InboxOptions {
  /**
   * Where the message id comes from. Outbox handlers always use the event id.
   * @default `{ header: 'Idempotency-Key' }` for HTTP, `{ path: 'id' }` for microservices, and
   * for a binary-mode CloudEvent its `id` attribute header (`ce-id`, `cloudEvents_id`, …)
   */
  messageId?: InboxMessageIdSource;
  /**
   * Name under which this consumer records messages; keep it stable across deploys, and give two
   * consumers of one message different names.
   * @default the outbox handler name, or `ClassName.methodName`
   */
  consumer?: string;
  /**
   * Returned instead of running the method when the message was already processed; a function is
   * called with the execution context. @default undefined
   */
  duplicateResult?: unknown;
  /** Run this consumer's inbox on another DataSource (an injection token or the instance). */
  dataSource?: InboxDataSourceToken | object;
  /** Run this consumer's inbox through another executor (another database or client). */
  executor?: SqlExecutor;
  /** @default the module's `inbox.isolationLevel` */
  isolationLevel?: InboxIsolationLevel;
  /** @default the module's `inbox.lockTimeoutMs` */
  lockTimeoutMs?: number;
  /**
   * RabbitMQ: set `false` when the microservice runs with `noAck: false` (manual acknowledgement,
   * which dead-lettering needs). The inbox then rejects a message it refuses (no usable id) with
   * `nack(requeue = false)`, so the queue's dead-letter exchange gets it, and acknowledges a
   * duplicate whose method it skipped. Leave it unset with `noAck: true`: acking twice closes the
   * channel. @default true (Nest's default)
   */
  noAck?: boolean;
  /**
   * HTTP only: who a key belongs to, e.g. `(req) => req.user.id`. Keys are unique per (consumer,
   * scope): another principal's equal key is another request. Without it every caller of the route
   * shares one key space (a different request with a known key still gets 422, never its result).
   * `undefined`/`null` is one scope of its own (anonymous callers).
   * @default none: keys are scoped by the consumer only
   */
  scope?: (request: any, context: ExecutionContext) => unknown;
  /**
   * HTTP only: what a key is bound to. A repeat of the key with a different fingerprint is refused
   * with 422 (`IdempotencyKeyReusedError`). `false` turns the check off; a function returns the
   * value to hash (JSON).
   * @default the request method, URL (path and query) and parsed body
   */
  fingerprint?: false | ((request: any, context: ExecutionContext) => unknown);
}

/** Counters of `InboxService.stats()`, since the process started. */
export interface InboxStats {
  /** Messages claimed and committed (the effect ran once). */
  processed: number;
  /** Deliveries skipped because the message was already processed. */
  duplicates: number;
  /** Claims rolled back because the method (or the commit) failed. */
  failed: number;
  /** Claims retried after a deadlock or serialization failure. */
  transientRetries: number;
  /** Records deleted by the retention job. */
  cleanupDeleted: number;
  /** Retention runs skipped because another process held the cleanup lock. */
  cleanupSkipped: number;
}
