import { OutboxError } from './outbox.error';

/**
 * The same message is being processed by another transaction right now, and this delivery gave up
 * waiting for it after `lockTimeoutMs` instead of holding a pooled connection until it ends. HTTP
 * answers 409; an outbox delivery retries later, when the first run has committed (then this one
 * is a duplicate) or rolled back (then it runs).
 */
export class InboxInProgressError extends OutboxError {
  constructor(
    readonly consumer: string,
    readonly messageId: string,
    readonly lockTimeoutMs: number,
  ) {
    super(
      `Message "${messageId}" of consumer "${consumer}" is still being processed by another ` +
        `transaction (waited ${lockTimeoutMs} ms for its inbox record); retry later. ` +
        'Raise inbox.lockTimeoutMs if your consumers run longer and callers should wait instead.',
    );
  }
}
