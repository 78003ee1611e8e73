import { OutboxEvent } from '../interfaces/outbox-event.interface';
import { OutboxBatchContext } from '../interfaces/outbox-handler.interface';
import { RegisteredHandler } from '../outbox-handler.registry';
import { HandlerCall } from './handler-call';
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
export class BatchRun extends HandlerCall {
  readonly events: OutboxEvent[];

  constructor(
    private readonly owner: BatchOwner,
    readonly slots: Slot[],
    readonly handler: RegisteredHandler,
  ) {
    super();
    this.events = slots.map((s) => s.delivery.event);
  }

  protected end(reason: unknown): void {
    this.owner.finishBatch(this, reason, true);
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
