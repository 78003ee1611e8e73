import type { InjectionToken } from '@nestjs/common';
import type { IdempotencyStore } from '../idempotency/idempotency-store.interface';
import { BackoffOptions } from './outbox-module-options.interface';
import { OutboxEvent } from './outbox-event.interface';

/**
 * Duplicate suppression for handlers whose effects are not in SQL (see `runIdempotent`): the
 * handler runs at most once per key while the done mark lives. Not an exactly-once boundary; for
 * effects in your database use `@Inbox()`.
 */
export interface OutboxHandlerIdempotencyOptions {
  /** An `IdempotencyStore` instance, or the injection token of one. */
  store: IdempotencyStore | InjectionToken;
  /** @default event.id */
  key?: (event: OutboxEvent) => string;
  /** How long a run blocks duplicates. @default handler timeout + dispatcher.leaseMs */
  processingTtlMs?: number;
  /** How long a done mark suppresses duplicates; cover retries and replays. @default 7 days */
  doneTtlMs?: number;
}

/**
 * `@OutboxHandler(type, { batch })`: the method receives an array of events in one call
 * (docs/handlers.md, "Batch handlers").
 */
export interface OutboxBatchOptions {
  /**
   * Most events per call, 1–1000. A batch holds what this worker has claimed and not started
   * when a handler slot frees, up to `max`; claims bring at most `dispatcher.batchSize` each.
   */
  max: number;
}

export interface OutboxHandlerOptions {
  /** Stable handler name used in delivery and inbox records. @default `ClassName.methodName` */
  name?: string;
  /** @default dispatcher.maxAttempts */
  maxAttempts?: number;
  /** Merged over dispatcher.backoff. */
  backoff?: BackoffOptions;
  /** @default dispatcher.handlerTimeoutMs */
  timeoutMs?: number;
  /** Return false to dead-letter at once (reason `rejected`) instead of retrying. */
  retryIf?: (error: unknown, attempt: number) => boolean;
  /** Skip the handler for keys it already handled (duplicate suppression). */
  idempotency?: OutboxHandlerIdempotencyOptions;
  /**
   * Call the method with an array of events of its types (`(events, context)`, context an
   * `OutboxBatchContext`) instead of one at a time. Not with `idempotency` or `@Inbox()`.
   */
  batch?: OutboxBatchOptions;
}

/** Second argument of every outbox handler. */
export interface OutboxHandlerContext {
  /** 1-based attempt number. */
  attempt: number;
  /** Aborted on handler timeout, lease loss or shutdown; pass it to fetch/DB calls. */
  signal: AbortSignal;
  workerId: string;
  deliveryId: string;
  handler: string;
}

/** Second argument of a batch handler (`@OutboxHandler(type, { batch })`). */
export interface OutboxBatchContext {
  /** Aborted on the batch's timeout, a lost lease of one of its events, or shutdown. */
  signal: AbortSignal;
  workerId: string;
  handler: string;
  /** One entry per event, in the order of the events: its delivery id and 1-based attempt. */
  deliveries: ReadonlyArray<{ readonly deliveryId: string; readonly attempt: number }>;
}

export type OutboxHandlerFn<TPayload = unknown> = (
  event: OutboxEvent<TPayload>,
  context: OutboxHandlerContext,
) => unknown;
