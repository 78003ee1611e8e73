import { LeaseLostError } from '../errors/lease-lost.error';
import { OutboxHandlerContext } from '../interfaces/outbox-handler.interface';
import { ClaimedDelivery, Lease } from '../interfaces/outbox-store.interface';
import { RegisteredHandler } from '../outbox-handler.registry';
import { KeptLease } from './lease-keeper';
import { PendingAck } from './outcome-reporter';

/** How a handler run went, for the event stream (absent: the delivery never ran here). */
export interface RunTiming {
  startedAt: number;
  durationMs: number;
}

/** The call a batch handler's delivery runs in (`BatchRun`), as its slot sees it. */
export interface SlotBatch {
  /** Stops the call, and with it every delivery of the batch. */
  interrupt(reason: unknown): void;
}

/** Who a slot tells what happened to it: the runs (`HandlerRuns`). */
export interface SlotOwner {
  /** The keeper could not keep the slot's lease. */
  lost(slot: Slot, error: LeaseLostError): void;
  /** The run ended: its handler settled, or it was interrupted (first one wins). */
  finish(slot: Slot, failure: unknown, failed: boolean): void;
  /** The slot's ack was written. */
  acked(slot: Slot): void;
  /** The slot's ack was refused (lease lost) or failed. */
  ackFailed(slot: Slot, error: unknown): void;
}

/**
 * One claimed delivery, from its claim to its outcome: waiting for a handler slot, then running.
 * One object per delivery is the lease the keeper renews (`KeptLease`), the queue entry, the run
 * and the pending ack the reporter batches (`PendingAck`), so a delivery allocates no closures
 * and, besides the handler's own, no promises of its own.
 */
export class Slot implements KeptLease, PendingAck, RunTiming {
  /** Replaced by each renewal. */
  lease: Lease;
  /** Set by the keeper. */
  expiresAt = 0;
  renewing = false;
  /** Running: in `runs`, its handler called. */
  running = false;
  /** Its run ended (handler settled or interrupted); later settlements are ignored. */
  finished = false;
  /** When the handler started: epoch ms (for lag) and monotonic (for its duration). */
  startedAt = 0;
  started = 0;
  durationMs = 0;
  /** Monotonic local time (`performance.now()`) after which the handler counts as timed out. */
  deadline = Infinity;
  timeoutMs = 0;
  /** Created on first use of `context.signal`: most handlers never read it. */
  controller: AbortController | null = null;
  /** Why the run was stopped from outside (timeout, lease loss, shutdown). */
  interruptedBy: unknown = undefined;
  invocation: Promise<unknown> | null = null;
  /** The handler's span, when tracing is on (ended when the handler settles). */
  span: unknown = null;
  /** The batch call it runs in, for a batch handler's delivery (`BatchRun`). */
  batch: SlotBatch | null = null;
  /** `done()`'s promise, made only when something waits for the run (drain, shutdown). */
  private doneWait: { promise: Promise<void>; resolve: () => void } | null = null;

  constructor(
    private readonly owner: SlotOwner,
    readonly delivery: ClaimedDelivery,
    readonly handler: RegisteredHandler,
  ) {
    this.lease = delivery.lease;
  }

  /** The keeper could not keep the lease. */
  lose(error: LeaseLostError): void {
    this.owner.lost(this, error);
  }

  /** Stops the run from outside: it ends at once with `reason` as its failure. */
  interrupt(reason: unknown): void {
    if (this.interruptedBy !== undefined || this.finished) return;
    this.interruptedBy = reason;
    this.controller?.abort(reason);
    // As a rejection would: after the current job, so a loop interrupting runs is not reentered.
    queueMicrotask(() => this.owner.finish(this, reason, true));
  }

  /** Settles once the run ended and its outcome was handed to the reporter. */
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

  /** The ack was written (`PendingAck`). */
  resolve(): void {
    this.owner.acked(this);
  }

  /** The ack was refused (lease lost) or failed (`PendingAck`). */
  reject(error: unknown): void {
    this.owner.ackFailed(this, error);
  }
}

/**
 * What a handler sees of its run. `signal` is an own, enumerable accessor (so `{ ...ctx }` and
 * `toEqual` see it as on a plain object), and the AbortController behind it is only made when it
 * is read (making one costs ~5 µs). Every context shares one accessor descriptor: a getter
 * closure per context cost ~1.5 µs per delivery (the object's shape could not be shared).
 */
export class RunContext implements OutboxHandlerContext {
  readonly attempt: number;
  readonly workerId: string;
  readonly deliveryId: string;
  readonly handler: string;
  declare readonly signal: AbortSignal;
  readonly #slot: Slot;

  constructor(slot: Slot, workerId: string) {
    this.attempt = slot.delivery.attempt;
    this.workerId = workerId;
    this.deliveryId = slot.delivery.id;
    this.handler = slot.handler.name;
    this.#slot = slot;
    Object.defineProperty(this, 'signal', SIGNAL_PROPERTY);
  }

  static signalOf(context: RunContext): AbortSignal {
    const slot = context.#slot;
    slot.controller ??= new AbortController();
    if (slot.interruptedBy !== undefined && !slot.controller.signal.aborted)
      slot.controller.abort(slot.interruptedBy);
    return slot.controller.signal;
  }
}

const SIGNAL_PROPERTY: PropertyDescriptor = {
  enumerable: true,
  get(this: RunContext): AbortSignal {
    return RunContext.signalOf(this);
  },
};
