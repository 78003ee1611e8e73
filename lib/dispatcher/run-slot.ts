import { LeaseLostError } from '../errors/lease-lost.error';
import { OutboxHandlerContext } from '../interfaces/outbox-handler.interface';
import { ClaimedDelivery, Lease } from '../interfaces/outbox-store.interface';
import { RegisteredHandler } from '../outbox-handler.registry';
import { HandlerCall } from './handler-call';
import { KeptLease } from './lease-keeper';

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
}

/**
 * One claimed delivery, from its claim to the end of its run: waiting for a handler slot, then
 * running. One object per delivery is the lease the keeper renews (`KeptLease`), the queue entry
 * and the run, so a delivery allocates no closures and, besides the handler's own, no promises of
 * its own. A successful run's ack is a smaller object of its own (`SucceededRun`, in
 * run-outcomes.ts), so nothing keeps the slot and its delivery once the handler returned.
 */
export class Slot extends HandlerCall implements KeptLease, RunTiming {
  /** Replaced by each renewal. */
  lease: Lease;
  /** The delivery has a key: its outcome, written, frees the key's next event. */
  readonly keyed: boolean;
  /** Set by the keeper. */
  expiresAt = 0;
  renewing = false;
  /** Its place in the keeper's list (set by the keeper). */
  keptAt = -1;
  /** Running: in `runs`, its handler called. */
  running = false;
  durationMs = 0;
  /** The batch call it runs in, for a batch handler's delivery (`BatchRun`). */
  batch: SlotBatch | null = null;

  constructor(
    private readonly owner: SlotOwner,
    readonly delivery: ClaimedDelivery,
    readonly handler: RegisteredHandler,
  ) {
    super();
    this.lease = delivery.lease;
    this.keyed = isKeyed(delivery);
  }

  protected end(reason: unknown): void {
    this.owner.finish(this, reason, true);
  }

  /** The keeper could not keep the lease. */
  lose(error: LeaseLostError): void {
    this.owner.lost(this, error);
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
    return context.#slot.signal();
  }
}

const SIGNAL_PROPERTY: PropertyDescriptor = {
  enumerable: true,
  get(this: RunContext): AbortSignal {
    return RunContext.signalOf(this);
  },
};

/** Whether a delivery has a key: its outcome, written, frees the key for the key's next event. */
export function isKeyed(delivery: ClaimedDelivery): boolean {
  return delivery.event.key !== null && delivery.event.key !== undefined;
}
