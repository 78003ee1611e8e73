import { OutboxError } from './outbox.error';

/**
 * The caller no longer owns the lease of a delivery (another worker reclaimed it, or it expired).
 * The outcome is discarded and the delivery is redelivered later (docs/guarantees.md, Guarantees 4).
 */
export class LeaseLostError extends OutboxError {
  constructor(
    readonly deliveryId: string,
    readonly owner: string,
  ) {
    super(
      `Lease on delivery ${deliveryId} is no longer held by ${owner}; the outcome was discarded ` +
        `and the delivery will be redelivered.`,
    );
  }
}
