/** Outcome of `IdempotencyStore.claim`. */
export type IdempotencyClaim =
  /** This caller may run the effect; pass `token` to `release` if it fails. */
  | { status: 'acquired'; token: string }
  /** The effect already completed (within the done TTL). */
  | { status: 'done' }
  /** Another caller is running it right now (within its processing TTL). */
  | { status: 'in-progress' };

/**
 * Remembers which messages a handler already processed, to suppress duplicates of side effects
 * that cannot join an inbox transaction (HTTP calls, e-mails, Redis writes).
 *
 * This is duplicate suppression, not an exactly-once boundary: the effect and `markDone` are two
 * separate writes, so a crash between them (or a processing TTL shorter than the handler's run)
 * still lets the effect happen twice. For exactly-once effects write them with `@Inbox()` in SQL.
 */
export interface IdempotencyStore {
  /**
   * Takes the key for `processingTtlMs` unless it is done or already taken. The claim expires on
   * its own, so a crashed worker never blocks the key for longer than that.
   */
  claim(scope: string, key: string, processingTtlMs: number): Promise<IdempotencyClaim>;
  /** Records the effect as done for `doneTtlMs`; later claims answer `done` until then. */
  markDone(scope: string, key: string, doneTtlMs: number): Promise<void>;
  /**
   * Gives the key back after a failed attempt so a redelivery can run it. With `token` only that
   * claim is released (not a newer one, never a done mark); without, any in-progress claim is.
   * Returns whether something was released.
   */
  release(scope: string, key: string, token?: string): Promise<boolean>;
  isDone(scope: string, key: string): Promise<boolean>;
}
