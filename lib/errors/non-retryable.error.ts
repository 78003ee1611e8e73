import { OutboxError } from './outbox.error';

/** Throw from a handler to dead-letter the delivery at once with reason `rejected` (docs/guarantees.md, Guarantees 8). */
export class NonRetryableError extends OutboxError {
  constructor(
    message: string,
    override readonly cause?: unknown,
  ) {
    super(message);
  }
}
