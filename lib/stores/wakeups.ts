/**
 * Cross-process wake-ups (docs/wakeups.md): a producer signals, after its appends commit, that
 * there may be work; workers that hear it claim at once instead of at their next poll. A signal
 * is only a hint — it carries nothing the receiver trusts, and the claim decides what is due.
 */

/** Producers send at most one signal per this window (the first at once, the rest coalesced). */
export const WAKEUP_COALESCE_MS = 5;
/** Reconnect delays of a dropped wake-up subscription: doubling from the first to the last. */
export const WAKEUP_RECONNECT_MIN_MS = 100;
export const WAKEUP_RECONNECT_MAX_MS = 5_000;

/**
 * Sends at most one signal per `windowMs`: the first of a quiet spell goes at once (no added
 * latency), further ones within the window become one trailing signal, and a signal never
 * overlaps the previous one still being sent (a slow pool cannot pile up NOTIFYs).
 */
export class CoalescedSignal {
  private timer: NodeJS.Timeout | null = null;
  private sending = false;
  private pending = false;
  private closed = false;
  /** Signals sent (after coalescing). */
  sent = 0;

  constructor(
    private readonly send: () => Promise<unknown>,
    private readonly onError: (error: unknown) => void,
    private readonly windowMs = WAKEUP_COALESCE_MS,
  ) {}

  signal(): void {
    if (this.closed) return;
    if (this.timer || this.sending) {
      this.pending = true;
      return;
    }
    this.fire();
  }

  close(): void {
    this.closed = true;
    this.pending = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private fire(): void {
    this.pending = false;
    this.sending = true;
    this.sent++;
    const window = new Promise<void>((resolve) => {
      this.timer = setTimeout(resolve, this.windowMs);
      this.timer.unref();
    });
    const sent = this.send().then(
      () => undefined,
      (error: unknown) => this.onError(error),
    );
    void Promise.all([sent, window]).then(() => {
      this.timer = null;
      this.sending = false;
      if (this.pending && !this.closed) this.fire();
    });
  }
}

/** Delay before reconnect attempt `n` (0-based) of a wake-up subscription. */
export function reconnectDelay(attempt: number): number {
  return Math.min(WAKEUP_RECONNECT_MAX_MS, WAKEUP_RECONNECT_MIN_MS * 2 ** Math.min(attempt, 16));
}
