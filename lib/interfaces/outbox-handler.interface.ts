import { BackoffOptions } from './outbox-module-options.interface';
import { OutboxEvent } from './outbox-event.interface';

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
