import { IdempotencyInProgressError } from '../errors/idempotency-in-progress.error';
import { IdempotencyStore } from './idempotency-store.interface';

export interface RunIdempotentOptions {
  /**
   * How long a claim blocks other runs of the same key. Make it longer than the handler can run
   * (its timeout); a shorter one lets a duplicate start while the first is still running.
   */
  processingTtlMs: number;
  /**
   * How long the done mark suppresses duplicates. Must cover the redelivery and replay window
   * (lease + every retry backoff + how long dead letters may wait for a replay).
   */
  doneTtlMs: number;
}

export type IdempotentOutcome<T> =
  /** `fn` ran; `recorded` says whether the done mark was written (see `recordError`). */
  | { status: 'ran'; result: T; recorded: true }
  | { status: 'ran'; result: T; recorded: false; recordError: unknown }
  /** The key was already done; `fn` did not run. */
  | { status: 'skipped' };

/**
 * Runs `fn` at most once per (scope, key) while the done mark lives: claim → fn → mark done. When
 * `fn` throws, the claim is released and the error rethrown, so a retry runs it again. When another
 * worker holds the key it throws `IdempotencyInProgressError`, meaning "retry later".
 *
 * If marking done fails after `fn` succeeded, the outcome still reports success (`recorded:
 * false`): the effect happened, and failing the delivery would only make a duplicate more likely.
 * Duplicate suppression, not an exactly-once boundary.
 */
export async function runIdempotent<T>(
  store: IdempotencyStore,
  scope: string,
  key: string,
  options: RunIdempotentOptions,
  fn: () => Promise<T> | T,
): Promise<IdempotentOutcome<T>> {
  const claim = await store.claim(scope, key, options.processingTtlMs);
  if (claim.status === 'done') return { status: 'skipped' };
  if (claim.status === 'in-progress') throw new IdempotencyInProgressError(scope, key);
  let result: T;
  try {
    result = await fn();
  } catch (error) {
    // A failed release only delays the retry until the processing TTL ends.
    await store.release(scope, key, claim.token).catch(() => undefined);
    throw error;
  }
  try {
    await store.markDone(scope, key, options.doneTtlMs);
    return { status: 'ran', result, recorded: true };
  } catch (recordError) {
    return { status: 'ran', result, recorded: false, recordError };
  }
}
