import { Logger } from '@nestjs/common';
import { AbandonedRunError } from '../errors/abandoned-run.error';
import { HandlerTimeoutError } from '../errors/handler-timeout.error';
import { LeaseLostError } from '../errors/lease-lost.error';
import { OutboxError } from '../errors/outbox.error';
import { ResolvedOutboxOptions } from '../interfaces/outbox-module-options.interface';
import { ClaimedDelivery, Lease } from '../interfaces/outbox-store.interface';
import type { OutboxTracing } from '../observability/outbox-tracing';
import { OutboxHandlerRegistry } from '../outbox-handler.registry';
import { AbandonedRuns } from './abandoned-runs';
import { RunResult } from './delivery-outcome';
import { LeaseKeeper } from './lease-keeper';
import { RunOutcomes } from './run-outcomes';
import { RunContext, Slot, SlotOwner } from './run-slot';

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
export class HandlerRuns implements SlotOwner {
  private readonly logger = new Logger('OutboxDispatcher');
  private readonly config: ResolvedOutboxOptions['dispatcher'];
  /** Running handlers. */
  private readonly runs = new Set<Slot>();
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

  /** Running handlers. */
  get running(): number {
    return this.runs.size;
  }

  /** Deliveries held: running, or waiting for a slot. */
  get held(): number {
    return this.runs.size + this.waiting.length;
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
      this.runs.size < this.config.concurrency &&
      this.waiting.length > 0
    ) {
      this.launch(this.waiting.shift()!);
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
    return [...this.runs].map((r) => r.done());
  }

  interruptAll(reason: unknown): void {
    for (const run of this.runs) run.interrupt(reason);
  }

  stop(): void {
    this.clearTimeoutTimer();
  }

  /** The keeper lost a kept lease: stop the run, or drop the delivery if it never started. */
  lost(slot: Slot, error: LeaseLostError): void {
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
      this.runs.delete(slot);
      this.startWaiting();
      this.host.slotFreed();
      slot.settleDone();
    }
  }

  acked(slot: Slot): void {
    this.outcomes.delivered(slot.delivery, slot);
  }

  ackFailed(slot: Slot, error: unknown): void {
    this.outcomes.reportFailed(slot.delivery, 'ack', error);
  }

  private launch(slot: Slot): void {
    const { delivery, handler } = slot;
    slot.timeoutMs = handler.timeoutMs ?? this.config.handlerTimeoutMs;
    slot.startedAt = Date.now();
    slot.started = performance.now();
    slot.deadline = slot.started + slot.timeoutMs;
    slot.running = true;
    this.runs.add(slot);
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
    for (const run of this.runs) {
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
