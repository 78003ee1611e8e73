import { OutboxError } from './outbox.error';

/**
 * An idempotency key came back with a different request (method, URL or body) than the one it
 * was first used for. The IETF idempotency-key draft answers 422: the client reused a key by
 * mistake, and must not get the first request's outcome. HTTP answers 422.
 */
export class IdempotencyKeyReusedError extends OutboxError {
  constructor(
    readonly consumer: string,
    readonly key: string,
  ) {
    super(
      `Idempotency key "${key}" of ${consumer} was already used for a different request; ` +
        'send a new key for a new request.',
    );
  }
}
