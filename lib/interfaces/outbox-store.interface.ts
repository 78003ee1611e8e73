import { OutboxEvent, OutboxHeaders } from './outbox-event.interface';

/** A validated event plus the handler names it must be delivered to. */
export interface AppendableEvent {
  id: string;
  type: string;
  payload: unknown;
  key: string | null;
  headers: OutboxHeaders;
  occurredAt: Date;
  /** `null` means "now" by the store clock. */
  availableAt: Date | null;
  /**
   * Handlers registered for `type` in the appending process. Empty: the store writes one
   * unexpanded delivery, expanded by the first worker that claims with handlers for the type.
   */
  handlers: string[];
}

export interface StoreAppendOptions {
  /** A transaction handle (TypeORM `EntityManager` / `QueryRunner`) for stores that support it. */
  manager?: unknown;
  /** Another client's transaction object (a pg `PoolClient` after `BEGIN`) for the 'sql' store. */
  tx?: unknown;
}

/** The handlers a worker runs, each with the event types it subscribes to. */
export interface HandlerSubscription {
  name: string;
  types: string[];
}

export interface ClaimRequest {
  workerId: string;
  handlers: HandlerSubscription[];
  /** Maximum deliveries to claim. */
  limit: number;
  leaseMs: number;
}

/** A worker's time-limited claim on a delivery (see docs/publishing.md). */
export interface Lease {
  deliveryId: string;
  owner: string;
  token: string;
  leaseUntil: Date;
}

export interface ClaimedDelivery {
  /** Delivery id (UUID). */
  id: string;
  handler: string;
  /** 1-based number of this attempt (counts claims, including those lost to a crash). */
  attempt: number;
  event: OutboxEvent;
  lease: Lease;
}

/** One recorded failure of a delivery. */
export interface DeliveryError {
  name: string;
  message: string;
  /**
   * The first lines of the failure's stack, bounded (the `errorStacks` module option); absent
   * when stacks are off, the failure had none, or it was recorded before stacks were kept.
   */
  stack?: string;
  at: Date;
  attempt: number;
  workerId: string;
}

/** A failure as the dispatcher reports it; the store stamps the time with its own clock. */
export type DeliveryErrorInput = Omit<DeliveryError, 'at'>;

export type DeadLetterReason = 'rejected' | 'exhausted';

export interface DeadLetter {
  /** Delivery id (UUID). */
  id: string;
  eventId: string;
  type: string;
  key: string | null;
  handler: string;
  payload: unknown;
  headers: OutboxHeaders;
  occurredAt: Date;
  attempts: number;
  reason: DeadLetterReason;
  /** Most recent last; at most `OUTBOX_ERROR_HISTORY` entries. */
  errors: DeliveryError[];
  deadAt: Date;
}

/**
 * Conditions on dead letters, all of which must hold. A field left `undefined` is no condition.
 * Stores are never given `null` (the admin API refuses it with a 400); should one arrive anyway in
 * `type`, `handler` or `key`, it matches nothing, as SQL's `= NULL` does — never everything, and
 * `key: null` does not select events without a key.
 */
export interface DeadLetterFilter {
  type?: string;
  handler?: string;
  key?: string;
  /** Dead-lettered strictly before this time. */
  failedBefore?: Date;
  /** Dead-lettered at or after this time. */
  failedAfter?: Date;
}

/**
 * Which dead letters a bulk action touches. An empty filter matches every dead letter. An id
 * listed more than once is one dead letter: counted once.
 */
export type DeadLetterSelector = { ids: string[] } | { filter: DeadLetterFilter };

export interface DeadLetterPageQuery extends DeadLetterFilter {
  limit: number;
  /** Opaque cursor from the previous page's `nextCursor`. */
  cursor?: string;
}

export interface DeadLetterPage {
  items: DeadLetter[];
  /** `null` when this is the last page. */
  nextCursor: string | null;
}

export interface DeadLetterSummaryRow {
  type: string;
  handler: string;
  errorName: string;
  /** Last error message with numbers and ids masked, so similar failures group together. */
  fingerprint: string;
  count: number;
}

/** Open deliveries the admin API lists by state (docs/admin.md, Deliveries). */
export type DeliveryListState = 'retrying' | 'scheduled' | 'leased';

export interface DeliveryPageQuery {
  /**
   * `retrying`: pending with at least one attempt, by next attempt; `scheduled`: pending, never
   * attempted, due later, by due time; `leased`: under a live lease, by lease expiry.
   */
  state: DeliveryListState;
  type?: string;
  handler?: string;
  limit: number;
  /** Opaque cursor from the previous page's `nextCursor`. */
  cursor?: string;
  /**
   * Handlers known to the caller (its registry). The Redis store keeps leases per handler and
   * reads these (or `handler`) for `leased`; the others ignore it.
   */
  handlers?: string[];
}

/** One delivery as stored: open (pending, leased) or dead. */
export interface DeliveryRecord {
  id: string;
  eventId: string;
  type: string;
  key: string | null;
  /** `'*'` (`UNEXPANDED_HANDLER`) for an event not yet expanded to its handlers. */
  handler: string;
  status: 'pending' | 'leased' | 'dead';
  /** Claims so far (reset to 0 by a replay). */
  attempts: number;
  /** When a pending delivery is due; for others, when it last was. */
  availableAt: Date;
  leaseOwner: string | null;
  leaseUntil: Date | null;
  /** Most recent last, at most `OUTBOX_ERROR_HISTORY`. */
  errors: DeliveryError[];
}

export interface DeliveryPage {
  items: DeliveryRecord[];
  /** `null` when this is the last page. */
  nextCursor: string | null;
}

/** An event with every delivery still stored for it (delivered ones are gone). */
export interface EventRecord {
  event: OutboxEvent;
  deliveries: DeliveryRecord[];
}

export interface EventPageQuery {
  key: string;
  limit: number;
  /** Opaque cursor from the previous page's `nextCursor`. */
  cursor?: string;
  /** Handlers known to the caller; the Redis store finds deliveries by event and handler. */
  handlers?: string[];
}

export interface EventPage {
  /** Newest first (append order). */
  items: EventRecord[];
  nextCursor: string | null;
}

/** The event types and handlers a store holds open deliveries or dead letters of. */
export interface StoreCatalog {
  types: string[];
  handlers: HandlerSubscription[];
}

/** Due pending deliveries of one handler (the admin API's lag). */
export interface HandlerBacklog {
  handler: string;
  /** Pending deliveries whose time has come. */
  pending: number;
  /** Due time of the oldest of them; `null` when none. */
  oldestDueAt: Date | null;
}

export interface TypeStats {
  pending: number;
  leased: number;
  dead: number;
}

export interface OutboxStoreStats {
  /** Deliveries waiting (due now or scheduled for retry / later), including unexpanded ones. */
  pending: number;
  /** Pending deliveries whose time has come. */
  due: number;
  /** Deliveries under a live or expired lease. */
  leased: number;
  dead: number;
  /** Age of the oldest due pending delivery, by the store clock; 0 when none. */
  oldestPendingAgeMs: number;
  byType: Record<string, TypeStats>;
}

export interface CleanupOptions {
  /**
   * Delete events whose deliveries are all done (delivered, or dead letters since removed), this
   * long after they became due (SQL stores, which keep no per-delivery completion time) or after
   * their last delivery (memory, Redis).
   */
  deliveredRetentionMs: number;
  /** Delete dead letters older than this; `null` keeps them. */
  deadLetterRetentionMs: number | null;
  /**
   * Maximum rows removed per kind in one call (bounded batches). The dispatcher calls again
   * while a call comes back full, within a time budget.
   */
  batchSize: number;
}

export interface CleanupResult {
  events: number;
  deadLetters: number;
}

/**
 * Persistence of events and deliveries. Every store passes the contract suite in
 * `nestjs-outbox/testing`. Lease operations throw `LeaseLostError` unless the caller still owns
 * the live lease (docs/guarantees.md, Guarantees 4). Times come from the store clock (docs/guarantees.md, Guarantees 5).
 */
export interface OutboxStore {
  /**
   * True when `append()` writes with `options.manager` (a TypeORM `EntityManager` or
   * `QueryRunner`), so the events commit or roll back with that transaction. `OutboxService` hands
   * such a store the ambient transaction (`@Transactional()`, `@Inbox()`); for a store without it,
   * an `append()` inside an ambient transaction is refused unless the caller passes
   * `{ standalone: true }`. @default false
   */
  readonly joinsTransactions?: boolean;
  append(events: AppendableEvent[], options?: StoreAppendOptions): Promise<OutboxEvent[]>;
  claim(request: ClaimRequest): Promise<ClaimedDelivery[]>;
  renew(lease: Lease, leaseMs: number): Promise<Lease>;
  ack(lease: Lease): Promise<void>;
  /**
   * Optional batched `ack`: acknowledges every delivery whose lease is still owned and live, in
   * one commit, and returns the ids it acknowledged; the others lost their lease (fenced out,
   * unchanged). The dispatcher coalesces acks through it when a store has it.
   */
  ackMany?(leases: Lease[]): Promise<string[]>;
  retry(lease: Lease, delayMs: number, error: DeliveryErrorInput): Promise<void>;
  deadLetter(lease: Lease, reason: DeadLetterReason, error: DeliveryErrorInput): Promise<void>;
  /** Give a claimed but unstarted delivery back; the attempt does not count. */
  release(lease: Lease): Promise<void>;

  listDeadLetters(query: DeadLetterPageQuery): Promise<DeadLetterPage>;
  getDeadLetter(id: string): Promise<DeadLetter | null>;
  summarizeDeadLetters(filter: DeadLetterFilter): Promise<DeadLetterSummaryRow[]>;
  /** Back to pending with attempts reset; returns how many were replayed. */
  replay(selector: DeadLetterSelector, availableAt?: Date): Promise<number>;
  purge(selector: DeadLetterSelector): Promise<number>;

  /**
   * Optional (the admin API answers 501 without it): open deliveries in one state, keyset-paged.
   * Every store of this package has it.
   */
  listDeliveries?(query: DeliveryPageQuery): Promise<DeliveryPage>;
  /**
   * Optional: one event with its open deliveries and dead letters; `null` when unknown.
   * `handlers` are the handlers the caller knows for its type (the Redis store finds deliveries
   * by event and handler); a store that can list them by event ignores it.
   */
  inspectEvent?(id: string, handlers: string[]): Promise<EventRecord | null>;
  /** Optional: the events of one ordering key, newest first, each with its deliveries. */
  listEventsByKey?(query: EventPageQuery): Promise<EventPage>;
  /** Optional: types and handlers of the open deliveries and dead letters, at most `limit` pairs. */
  catalog?(limit: number): Promise<StoreCatalog>;
  /**
   * Optional: due pending deliveries per handler. The Redis store reads at most `limit` of them
   * (oldest first); the others count all.
   */
  backlog?(limit: number): Promise<HandlerBacklog[]>;

  stats(): Promise<OutboxStoreStats>;
  cleanup(options: CleanupOptions): Promise<CleanupResult>;
  /** The store clock. */
  now(): Promise<Date>;
  /**
   * Optional: calls `listener` after events appended through this store instance are committed
   * (the store's own transaction, or the caller's when it commits). The dispatcher of the same
   * process polls at once instead of waiting for its next tick. Returns an unsubscribe function.
   */
  onAppended?(listener: () => void): () => void;
  /**
   * Optional: from now on, signal other processes after appends through this store commit
   * (outside the producer's transaction, coalesced to a few signals per second at most). Stores
   * without a channel between processes leave it out. See docs/wakeups.md.
   */
  publishWakeups?(): void | Promise<void>;
  /**
   * Optional: calls `listener` when another process signals committed appends, and after the
   * subscription (re)connects (signals sent while it was down are lost, so the caller polls).
   * Keeps one dedicated connection and reconnects with backoff. Returns an unsubscribe function.
   */
  onWakeup?(listener: () => void): () => Promise<void>;
  /** Prepare storage if the store does that itself (no-op otherwise). */
  init?(): Promise<void>;
  /** Close what the store opened itself. */
  close?(): Promise<void>;
}
