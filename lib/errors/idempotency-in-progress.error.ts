import { OutboxError } from '../errors/outbox.error';

/**
 * Another worker is processing the same idempotency key right now. Thrown by `runIdempotent` so the
 * delivery is retried later, when the other run has either finished (then it is skipped) or failed.
 */
export class IdempotencyInProgressError extends OutboxError {
  constructor(
    readonly scope: string,
    readonly key: string,
  ) {
    super(
      `Idempotency key "${key}" in scope "${scope}" is being processed by another worker; ` +
        `this attempt is retried later. If no worker is running it, the claim expires after its processing TTL.`,
    );
  }
}
