import { Logger } from '@nestjs/common';
import { addPlaced, removePlaced } from './placed-list';
import { AbandonedRunError } from '../errors/abandoned-run.error';
import { HandlerTimeoutError } from '../errors/handler-timeout.error';
import { LeaseLostError } from '../errors/lease-lost.error';
import { OutboxError } from '../errors/outbox.error';
import { ResolvedOutboxOptions } from '../interfaces/outbox-module-options.interface';
import { ClaimedDelivery, Lease } from '../interfaces/outbox-store.interface';
import type { OutboxTracing } from '../observability/outbox-tracing';
import { OutboxHandlerRegistry } from '../outbox-handler.registry';
import { OutboxBatchError } from '../errors/outbox-batch.error';
import { AbandonedRuns } from './abandoned-runs';
import { BatchContext, BatchOwner, BatchRun } from './batch-run';
import { RunResult } from './delivery-outcome';
import { LeaseKeeper } from './lease-keeper';
import { RunOutcomes } from './run-outcomes';
import { RunContext, Slot, SlotOwner } from './run-slot';
import { isInstance } from './thrown-value';

/** A successful run's result (shared: it carries nothing of its own). */
const SUCCEEDED: RunResult = { failed: false };

/** What the runs need from the dispatcher around them. */
export interface RunsHost {
  /** Shutdown began: start nothing more. */
  stopping(): boolean;
  /** A handler slot freed (the claim scheduler may claim again). */
  slotFreed(): void;
  /** Gives a lease back to the store (logged, never thrown). */
  release(lease: Lease): Promise<void>;
}

/**
 * The deliveries this worker holds, from claim to outcome: waiting in line for a handler slot
 * (leases kept), then running (at most `concurrency`), each under its handler's timeout (one
 * timer, armed for the earliest deadline). A run ends when its handler settles or when it is
 * interrupted (timeout, lease lost, shutdown), whichever comes first; an interrupted handler that
 * still executes is an abandoned run. The outcome goes to `RunOutcomes`.
 */
export class HandlerRuns implements SlotOwner, BatchOwner {
  private readonly logger = new Logger('OutboxDispatcher');
  private readonly config: ResolvedOutboxOptions['dispatcher'];
  /**
   * Running handler calls (one delivery each, or a batch handler's batch), in no order; each
   * knows its place (`runAt`). Not a `Set`, for the reason `LeaseKeeper.kept` is not one.
   */
  private readonly runs: (Slot | BatchRun)[] = [];
  /** Deliveries in running calls (a batch counts each of its deliveries). */
  private runningDeliveries = 0;
  /** Claimed ahead, waiting for a slot, oldest first. */
  private readonly waiting: Slot[] = [];
  private timeoutTimer: NodeJS.Timeout | null = null;
  private timeoutAt = Infinity;

  constructor(
    options: ResolvedOutboxOptions,
    private readonly registry: OutboxHandlerRegistry,
    private readonly keeper: LeaseKeeper,
    private readonly outcomes: RunOutcomes,
    readonly abandoned: AbandonedRuns,
    private readonly tracing: OutboxTracing | null,
    private readonly host: RunsHost,
  ) {
    this.config = options.dispatcher;
  }

  /** Running handler calls (a batch is one). */
  get running(): number {
    return this.runs.length;
  }

  /** Deliveries held: running, or waiting for a slot. */
  get held(): number {
    return this.runningDeliveries + this.waiting.length;
  }

  /** Keeps the lease of a claimed delivery and puts it in line for a handler slot. */
  admit(delivery: ClaimedDelivery, sentAt: number): void {
    const handler = this.registry.get(delivery.handler);
    if (!handler) {
      void this.host.release(delivery.lease);
      return;
    }
    const maxAttempts = handler.maxAttempts ?? this.config.maxAttempts;
    if (delivery.attempt > maxAttempts) {
      // Earlier attempts died with their worker (crash or lost lease) without reporting.
      const error = new OutboxError(
        `No outcome reported by ${delivery.attempt - 1} attempt(s); the worker running them stopped`,
      );
      this.outcomes.report(
        delivery,
        delivery.lease,
        handler,
        { failed: true, failure: error },
        null,
      );
      return;
    }
    // A run given up on (timeout, lease lost) still executes, its handler ignoring its signal:
    // never start the delivery beside it. This attempt fails instead (retried with backoff, or
    // dead-lettered once exhausted), so a handler that never settles cannot hold its key.
    const previous = this.abandoned.get(delivery.id);
    if (previous) {
      const error = new AbandonedRunError(handler.name, previous.reason, previous.slot.timeoutMs);
      this.outcomes.report(
        delivery,
        delivery.lease,
        handler,
        { failed: true, failure: error },
        null,
      );
      return;
    }
    const slot = this.keeper.add(new Slot(this, delivery, handler), sentAt);
    this.waiting.push(slot);
  }

  /** Starts waiting deliveries while handler slots are free (not once shutdown began). */
  startWaiting(): void {
    while (
      !this.host.stopping() &&
      this.runs.length < this.config.concurrency &&
      this.waiting.length > 0
    ) {
      const slot = this.waiting.shift()!;
      if (slot.handler.batch) this.launchBatch(this.takeBatch(slot));
      else this.launch(slot);
    }
  }

  /** Takes the deliveries still waiting for a slot out of line, their leases no longer kept. */
  takeWaiting(): Slot[] {
    const unstarted = this.waiting.splice(0);
    for (const w of unstarted) this.keeper.release(w);
    return unstarted;
  }

  /** Settles as each running handler's run ends. */
  runsDone(): Promise<void>[] {
    return this.runs.map((r) => r.done());
  }

  interruptAll(reason: unknown): void {
    for (const run of this.runs.slice()) run.interrupt(reason);
  }

  stop(): void {
    this.clearTimeoutTimer();
  }

  /** The keeper lost a kept lease: stop the run, or drop the delivery if it never started. */
  lost(slot: Slot, error: LeaseLostError): void {
    if (slot.running && slot.batch) {
      // The batch's call shares one signal: it stops as a whole. This delivery's outcome is
      // discarded (its lease is gone); the others fail their attempt (see finishBatch).
      if (!slot.finished) slot.interruptedBy ??= error;
      return slot.batch.interrupt(error);
    }
    if (slot.running) return slot.interrupt(error);
    // Lost while waiting for a slot: it never started, so there is nothing to stop.
    const index = this.waiting.indexOf(slot);
    if (index >= 0) this.waiting.splice(index, 1);
    this.outcomes.leaseLost(slot.delivery, 'renewal');
  }

  /**
   * A run ended: its handler settled, or it was interrupted (first one wins). Releases its lease,
   * hands its outcome over and frees its slot.
   */
  finish(slot: Slot, failure: unknown, failed: boolean): void {
    if (slot.finished) return;
    slot.finished = true;
    try {
      slot.durationMs = performance.now() - slot.started;
      this.keeper.release(slot);
      const { delivery } = slot;
      const interrupted = slot.interruptedBy !== undefined && failure === slot.interruptedBy;
      if (failed && interrupted) this.abandoned.abandon(slot);
      const result: RunResult = failed
        ? { failed: true, failure, interruptedBy: slot.interruptedBy }
        : SUCCEEDED;
      this.outcomes.report(delivery, slot.lease, slot.handler, result, slot);
    } catch (error) {
      this.logger.error(`Unexpected dispatcher error: ${String(error)}`);
    } finally {
      this.removeRun(slot);
      this.runningDeliveries--;
      this.startWaiting();
      this.host.slotFreed();
      slot.settleDone();
    }
  }

  /**
   * A batch call ended: its handler settled, or it was interrupted. Each delivery's outcome is
   * decided on its own: all acknowledged when the call returned; when it threw an
   * `OutboxBatchError`, the events it names failed with their own errors and the rest are
   * acknowledged; any other failure fails every delivery (each retried or dead-lettered under
   * its own attempt count).
   */
  finishBatch(run: BatchRun, failure: unknown, failed: boolean): void {
    if (run.finished) return;
    run.finished = true;
    try {
      const durationMs = performance.now() - run.started;
      const interrupted = run.interruptedBy !== undefined && failure === run.interruptedBy;
      let named = failed && !interrupted && isInstance(failure, OutboxBatchError) ? failure : null;
      const stranger = named ? nameOutside(named, run) : undefined;
      if (stranger !== undefined) {
        // A name that is no event of the batch (a delivery id, a payload's id): the report is
        // wrong, so nothing of it is trusted; acknowledging the rest could lose a failed event.
        failure = new OutboxError(
          `OutboxBatchError names ${JSON.stringify(stranger)}, not the id of an event of this ` +
            'batch (name events by event or event.id): every event of the batch failed',
        );
        named = null;
      }
      for (const slot of run.slots) {
        slot.finished = true;
        slot.durationMs = durationMs;
        this.keeper.release(slot);
        let result: RunResult;
        if (!failed) {
          result = SUCCEEDED;
        } else if (named) {
          const own = named.failures.get(slot.delivery.event.id);
          result =
            own === undefined && !named.failures.has(slot.delivery.event.id)
              ? SUCCEEDED
              : { failed: true, failure: own };
        } else if (slot.interruptedBy !== undefined) {
          // Its own lease was lost: the outcome is discarded, as for a single delivery.
          result = { failed: true, failure: slot.interruptedBy, interruptedBy: slot.interruptedBy };
          this.abandoned.abandon(slot);
        } else if (interrupted && run.interruptedBy instanceof LeaseLostError) {
          // Another delivery's lease was lost: this one's is still held, so its attempt fails
          // and follows the retry policy rather than waiting for its lease to run out.
          slot.interruptedBy = run.interruptedBy;
          this.abandoned.abandon(slot);
          result = { failed: true, failure };
        } else if (interrupted) {
          slot.interruptedBy = run.interruptedBy;
          this.abandoned.abandon(slot);
          result = { failed: true, failure, interruptedBy: run.interruptedBy };
        } else {
          result = { failed: true, failure };
        }
        this.outcomes.report(slot.delivery, slot.lease, slot.handler, result, slot);
      }
    } catch (error) {
      this.logger.error(`Unexpected dispatcher error: ${String(error)}`);
    } finally {
      this.removeRun(run);
      this.runningDeliveries -= run.slots.length;
      this.startWaiting();
      this.host.slotFreed();
      run.settleDone();
    }
  }

  private launch(slot: Slot): void {
    const { delivery, handler } = slot;
    slot.timeoutMs = handler.timeoutMs ?? this.config.handlerTimeoutMs;
    slot.startedAt = Date.now();
    slot.started = performance.now();
    slot.deadline = slot.started + slot.timeoutMs;
    slot.running = true;
    this.addRun(slot);
    this.runningDeliveries++;
    this.armTimeout(slot.deadline);
    const context = new RunContext(slot, this.config.workerId);
    let invocation: Promise<unknown>;
    try {
      // With tracing on, each attempt runs in a consumer span continuing the appender's trace.
      invocation = this.tracing
        ? this.tracing.process(delivery.event, context, handler.invoke, slot)
        : handler.invoke(delivery.event, context);
    } catch (error) {
      invocation = Promise.reject(error);
    }
    slot.invocation = invocation;
    invocation.then(
      () => {
        if (slot.span) this.tracing!.endProcess(slot.span, false, undefined);
        this.finish(slot, undefined, false);
      },
      (error: unknown) => {
        if (slot.span) this.tracing!.endProcess(slot.span, true, error);
        this.finish(slot, error, true);
      },
    );
  }

  /**
   * `first` and the deliveries of its handler waiting behind it, up to the handler's `max`, in
   * the order claimed. The store leases at most one delivery per handler and key at a time
   * (docs/handlers.md, "Order per key"), so a batch never holds two events of one key.
   */
  private takeBatch(first: Slot): Slot[] {
    const { handler } = first;
    const max = handler.batch!.max;
    const members = [first];
    if (max === 1) return members;
    let kept = 0;
    for (let i = 0; i < this.waiting.length; i++) {
      const slot = this.waiting[i];
      if (members.length < max && slot.handler === handler) members.push(slot);
      else this.waiting[kept++] = slot;
    }
    this.waiting.length = kept;
    return members;
  }

  private launchBatch(slots: Slot[]): void {
    const handler = slots[0].handler;
    const run = new BatchRun(this, slots, handler);
    run.timeoutMs = handler.timeoutMs ?? this.config.handlerTimeoutMs;
    run.startedAt = Date.now();
    run.started = performance.now();
    run.deadline = run.started + run.timeoutMs;
    for (const slot of slots) {
      slot.batch = run;
      slot.running = true;
      slot.timeoutMs = run.timeoutMs;
      slot.startedAt = run.startedAt;
      slot.started = run.started;
      slot.deadline = run.deadline;
    }
    this.addRun(run);
    this.runningDeliveries += slots.length;
    this.armTimeout(run.deadline);
    const context = new BatchContext(run, this.config.workerId);
    const invoke = handler.batch!.invoke;
    let invocation: Promise<unknown>;
    try {
      invocation = this.tracing
        ? this.tracing.processBatch(run.events, context, invoke, run)
        : invoke(run.events, context);
    } catch (error) {
      invocation = Promise.reject(error);
    }
    run.invocation = invocation;
    for (const slot of slots) slot.invocation = invocation;
    invocation.then(
      () => {
        if (run.span) this.tracing!.endProcess(run.span, false, undefined);
        this.finishBatch(run, undefined, false);
      },
      (error: unknown) => {
        if (run.span) this.tracing!.endProcess(run.span, true, error);
        this.finishBatch(run, error, true);
      },
    );
  }

  private addRun(run: Slot | BatchRun): void {
    addPlaced(this.runs, run, 'runAt');
  }

  private removeRun(run: Slot | BatchRun): void {
    removePlaced(this.runs, run, 'runAt');
  }

  /** One timer for every handler timeout: armed for the earliest deadline. */
  private armTimeout(deadline: number): void {
    if (deadline >= this.timeoutAt) return;
    this.clearTimeoutTimer();
    this.timeoutAt = deadline;
    this.timeoutTimer = setTimeout(
      () => this.expireRuns(),
      Math.max(0, deadline - performance.now()),
    );
    this.timeoutTimer.unref();
  }

  private clearTimeoutTimer(): void {
    if (this.timeoutTimer) clearTimeout(this.timeoutTimer);
    this.timeoutTimer = null;
    this.timeoutAt = Infinity;
  }

  private expireRuns(): void {
    this.clearTimeoutTimer();
    const now = performance.now();
    let next = Infinity;
    for (const run of this.runs.slice()) {
      if (run.interruptedBy !== undefined) continue;
      if (run.deadline <= now) {
        run.interrupt(new HandlerTimeoutError(run.handler.name, run.timeoutMs));
      } else {
        next = Math.min(next, run.deadline);
      }
    }
    if (next < Infinity) this.armTimeout(next);
  }
}

/** The first name of `error` that is not the id of an event of `run`, if any. */
function nameOutside(error: OutboxBatchError, run: BatchRun): string | undefined {
  if (error.failures.size === 0) return undefined;
  // From the slots: the handler may have emptied or reordered the array it was given.
  const ids = new Set(run.slots.map((s) => s.delivery.event.id));
  for (const id of error.failures.keys()) if (!ids.has(id)) return id;
  return undefined;
}
