import { OutboxEvent } from '../interfaces/outbox-event.interface';
import { OutboxBatchContext } from '../interfaces/outbox-handler.interface';
import { RegisteredHandler } from '../outbox-handler.registry';
import { Slot } from './run-slot';

/** Who a batch run tells that it ended: the runs (`HandlerRuns`). */
export interface BatchOwner {
  finishBatch(run: BatchRun, failure: unknown, failed: boolean): void;
}

/**
 * One call of a batch handler over several claimed deliveries of it (docs/handlers.md, "Batch
 * handlers"). Each delivery keeps its own `Slot` — its lease kept, its outcome decided, written
 * and reported on its own — while the run holds what the call shares: one handler slot, one
 * timeout, one signal. It is interrupted as a whole (timeout, a lost lease, shutdown).
 */
export class BatchRun {
  readonly events: OutboxEvent[];
  deadline = Infinity;
  timeoutMs = 0;
  startedAt = 0;
  started = 0;
  finished = false;
  interruptedBy: unknown = undefined;
  controller: AbortController | null = null;
  invocation: Promise<unknown> | null = null;
  /** The batch's span, when tracing is on. */
  span: unknown = null;
  private doneWait: { promise: Promise<void>; resolve: () => void } | null = null;

  constructor(
    private readonly owner: BatchOwner,
    readonly slots: Slot[],
    readonly handler: RegisteredHandler,
  ) {
    this.events = slots.map((s) => s.delivery.event);
  }

  /** Stops the call from outside: every delivery of the batch ends with `reason`. */
  interrupt(reason: unknown): void {
    if (this.interruptedBy !== undefined || this.finished) return;
    this.interruptedBy = reason;
    this.controller?.abort(reason);
    queueMicrotask(() => this.owner.finishBatch(this, reason, true));
  }

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

  signal(): AbortSignal {
    this.controller ??= new AbortController();
    if (this.interruptedBy !== undefined && !this.controller.signal.aborted)
      this.controller.abort(this.interruptedBy);
    return this.controller.signal;
  }
}

/** What a batch handler sees of its run; `signal` is made on first read, as `RunContext`'s. */
export class BatchContext implements OutboxBatchContext {
  readonly workerId: string;
  readonly handler: string;
  readonly deliveries: ReadonlyArray<{ readonly deliveryId: string; readonly attempt: number }>;
  declare readonly signal: AbortSignal;
  readonly #run: BatchRun;

  constructor(run: BatchRun, workerId: string) {
    this.workerId = workerId;
    this.handler = run.handler.name;
    this.deliveries = run.slots.map((s) => ({
      deliveryId: s.delivery.id,
      attempt: s.delivery.attempt,
    }));
    this.#run = run;
    Object.defineProperty(this, 'signal', {
      enumerable: true,
      get: () => this.#run.signal(),
    });
  }
}
