import { OutboxError } from './outbox.error';

/** An event with this id already exists with different content (docs/guarantees.md, Guarantees 10). Nothing was written. */
export class DuplicateEventError extends OutboxError {
  constructor(readonly eventId: string) {
    super(
      `Event ${eventId} already exists with different content. Appending an existing id is only ` +
        `allowed with identical type, key, headers and payload; use a new id for a new event.`,
    );
  }
}
