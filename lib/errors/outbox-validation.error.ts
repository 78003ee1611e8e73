import { OutboxError } from './outbox.error';

/** An event, option or request failed validation; `field` names the offending path (e.g. `events[2].type`). */
export class OutboxValidationError extends OutboxError {
  constructor(
    readonly field: string,
    readonly reason: string,
  ) {
    super(`Invalid ${field}: ${reason}`);
  }
}
