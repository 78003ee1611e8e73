/**
 * What a delivery's run (`Slot`) and a batch handler's call (`BatchRun`) share: the call from its
 * start to its end, its deadline, stopped from outside at most once (timeout, a lost lease,
 * shutdown), its signal made on first read, and awaited by drain and shutdown.
 */
export abstract class HandlerCall {
  /** When the handler started: epoch ms (for lag) and monotonic (for its duration). */
  startedAt = 0;
  started = 0;
  /** Monotonic local time (`performance.now()`) after which the handler counts as timed out. */
  deadline = Infinity;
  timeoutMs = 0;
  /** It ended (handler settled or interrupted); later settlements are ignored. */
  finished = false;
  /** Created on first use of the signal: most handlers never read it. */
  controller: AbortController | null = null;
  /** Why the call was stopped from outside (timeout, lease loss, shutdown). */
  interruptedBy: unknown = undefined;
  invocation: Promise<unknown> | null = null;
  /** Its place in the runs' list while running, -1 otherwise (set by `HandlerRuns`). */
  runAt = -1;
  /** The handler's span, when tracing is on (ended when the handler settles). */
  span: unknown = null;
  /** `done()`'s promise, made only when something waits for the call (drain, shutdown). */
  private doneWait: { promise: Promise<void>; resolve: () => void } | null = null;

  /** Tells the owner the call ended with `reason` as its failure. */
  protected abstract end(reason: unknown): void;

  /** Stops the call from outside: it ends at once with `reason` as its failure. */
  interrupt(reason: unknown): void {
    if (this.interruptedBy !== undefined || this.finished) return;
    this.interruptedBy = reason;
    this.controller?.abort(reason);
    // As a rejection would: after the current job, so a loop interrupting runs is not reentered.
    queueMicrotask(() => this.end(reason));
  }

  /** Settles once the call ended and its outcome was handed to the reporter. */
  done(): Promise<void> {
    if (this.finished && this.doneWait === null) return Promise.resolve();
    if (!this.doneWait) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.doneWait = { promise, resolve };
    }
    return this.doneWait.promise;
  }

  settleDone(): void {
    this.doneWait?.resolve();
  }

  /** The call's signal, aborted with the reason it was interrupted for. */
  signal(): AbortSignal {
    this.controller ??= new AbortController();
    if (this.interruptedBy !== undefined && !this.controller.signal.aborted)
      this.controller.abort(this.interruptedBy);
    return this.controller.signal;
  }
}
