import type { OutboxEvent } from '../interfaces/outbox-event.interface';
import { OutboxError } from './outbox.error';

/**
 * Thrown by a batch handler (`@OutboxHandler(type, { batch: { max } })`) to say which events of
 * its batch failed, each with its own error: those are retried or dead-lettered one by one under
 * the handler's retry policy (a `NonRetryableError` dead-letters its event at once), and every
 * other event of the batch is acknowledged. Any other error fails every event of the batch.
 * Events are named by `event.id` (or the event itself). A name that is no event id of the batch
 * (a delivery id, say) makes the report untrusted: every event of the batch fails, as for any
 * other error.
 */
export class OutboxBatchError extends OutboxError {
  /** The failed events' errors, by event id. */
  readonly failures: ReadonlyMap<string, unknown>;

  constructor(failures: Iterable<readonly [OutboxEvent | string, unknown]>) {
    const byId = new Map<string, unknown>();
    for (const [event, error] of failures) {
      byId.set(typeof event === 'string' ? event : event.id, error);
    }
    const first = byId.values().next();
    const detail = first.done
      ? ''
      : `; first: ${first.value instanceof Error ? first.value.message : String(first.value)}`;
    super(`${byId.size} event(s) of the batch failed${detail}`);
    this.failures = byId;
  }
}
