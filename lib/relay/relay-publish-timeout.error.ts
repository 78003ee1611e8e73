import { OutboxError } from '../errors/outbox.error';

/**
 * The broker did not confirm a publish within `publishTimeoutMs`. The delivery is retried; the
 * message may still reach the broker late, which the consumer's `@Inbox()` absorbs.
 */
export class RelayPublishTimeoutError extends OutboxError {
  constructor(
    readonly relay: string,
    readonly eventId: string,
    readonly timeoutMs: number,
  ) {
    super(
      `Relay "${relay}": the broker did not confirm event ${eventId} within ${timeoutMs} ms ` +
        `(publishTimeoutMs); the delivery will be retried`,
    );
  }
}
