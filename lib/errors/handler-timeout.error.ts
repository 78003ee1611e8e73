import { OutboxError } from './outbox.error';

/** A handler ran longer than its timeout; counted as a failed attempt (docs/guarantees.md, Guarantees 8). */
export class HandlerTimeoutError extends OutboxError {
  constructor(
    readonly handler: string,
    readonly timeoutMs: number,
  ) {
    super(`Handler ${handler} timed out after ${timeoutMs} ms`);
  }
}
