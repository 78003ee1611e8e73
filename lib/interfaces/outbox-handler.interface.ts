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

export type OutboxHandlerFn<TPayload = unknown> = (
  event: OutboxEvent<TPayload>,
  context: OutboxHandlerContext,
) => unknown;
