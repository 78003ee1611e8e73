import { OutboxError } from './outbox.error';

/** Why a run was given up while its handler still ran. */
export type AbandonReason = 'timeout' | 'lease-lost' | 'shutdown';

/**
 * A delivery was claimed again while this worker's previous run of it, given up after its
 * timeout (or a lost lease), was still executing because its handler ignores its aborted
 * `signal`. The new attempt is not started beside it: it counts as a failed attempt, retried
 * with backoff or dead-lettered (`exhausted`) like any other (docs/guarantees.md, Guarantees 8).
 */
export class AbandonedRunError extends OutboxError {
  constructor(
    readonly handler: string,
    readonly reason: AbandonReason,
    readonly timeoutMs: number,
  ) {
    super(
      `The previous attempt of handler ${handler} on this worker ${
        reason === 'timeout'
          ? `timed out after ${timeoutMs} ms`
          : reason === 'lease-lost'
            ? 'lost its lease'
            : 'was stopped by a shutdown'
      } and its handler is still running, ignoring its abort signal; this attempt was not started and counts as failed`,
    );
  }
}
