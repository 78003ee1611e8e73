/** Small string map carried with an event: trace context, tenant, correlation id. */
export type OutboxHeaders = Record<string, string>;

/** A stored event (see docs/publishing.md). */
export interface OutboxEvent<TPayload = unknown> {
  /** UUID; generated on append when absent. */
  id: string;
  /** Event type such as `player.created`. */
  type: string;
  /** Any JSON value. */
  payload: TPayload;
  /** Ordering / aggregate key; deliveries sharing a key reach each handler in append order. */
  key: string | null;
  headers: OutboxHeaders;
  /** Business time of the event (application clock). */
  occurredAt: Date;
  /** Earliest delivery time (store clock when not given). */
  availableAt: Date;
}

/** What `OutboxService.append()` accepts. */
export interface OutboxEventInput<TPayload = unknown> {
  /** UUID; give one to make the append idempotent (docs/guarantees.md, Guarantees 10). */
  id?: string;
  type: string;
  payload: TPayload;
  key?: string | null;
  headers?: OutboxHeaders;
  /** @default now (application clock) */
  occurredAt?: Date | string;
  /** Delay the first delivery until this time. @default now (store clock) */
  availableAt?: Date | string;
}
