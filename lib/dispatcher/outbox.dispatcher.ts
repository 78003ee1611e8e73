import {
  BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  OnApplicationBootstrap,
  Optional,
} from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import type { SchedulerRegistry } from '@nestjs/schedule';
import { AbandonedRunError, AbandonReason } from '../errors/abandoned-run.error';
import { HandlerTimeoutError } from '../errors/handler-timeout.error';
import { LeaseLostError } from '../errors/lease-lost.error';
import { OutboxError } from '../errors/outbox.error';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxHandlerContext } from '../interfaces/outbox-handler.interface';
import { ResolvedOutboxOptions } from '../interfaces/outbox-module-options.interface';
import {
  ClaimedDelivery,
  DeliveryErrorInput,
  Lease,
  OutboxStore,
} from '../interfaces/outbox-store.interface';
import {
  OUTBOX_CLEANUP_INTERVAL,
  OUTBOX_DISPATCHER_INTERVAL,
  OUTBOX_RESOLVED_OPTIONS,
  OUTBOX_STORE,
} from '../outbox.constants';
import { OutboxHandlerRegistry, RegisteredHandler } from '../outbox-handler.registry';
import { OutboxMessages } from '../outbox.messages';
import { OUTBOX_TRACING } from '../observability/observability.constants';
import { OutboxEvents } from '../observability/outbox-events';
import type {
  DeliveryObservation,
  ObservedError,
  OutboxObservationKind,
} from '../observability/outbox-events.interface';
import type { OutboxTracing } from '../observability/outbox-tracing';
import { decideOutcome, RunResult } from './delivery-outcome';
import { KeptLease, LeaseKeeper } from './lease-keeper';
import { OutcomeReporter, PendingAck } from './outcome-reporter';
import { OutboxDispatcherStats } from './outbox-dispatcher.stats';

/** Reason given to a handler's signal when the application shuts down under it. */
export class OutboxShutdownError extends OutboxError {
  constructor() {
    super('The application is shutting down');
  }
}

/** Claims one worker may have in flight at once (see `poll`). */
const MAX_CLAIMS_IN_FLIGHT = 3;
/** How long one retention run keeps deleting full batches before it leaves the rest for the next. */
const CLEANUP_BUDGET_MS = 10_000;

/** Where the dispatcher is in its life. */
type DispatcherState = 'idle' | 'running' | 'stopping';

/** A successful run's result (shared: it carries nothing of its own). */
const SUCCEEDED: RunResult = { failed: false };

/**
 * One claimed delivery, from its claim to its outcome: waiting for a handler slot, then running.
 * One object per delivery is the lease the keeper renews (`KeptLease`), the queue entry, the run
 * and the pending ack the reporter batches (`PendingAck`), so a delivery allocates no closures
 * and, besides the handler's own, no promises of its own.
 */
class Slot implements KeptLease, PendingAck, RunTiming {
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
  /** `done()`'s promise, made only when something waits for the run (drain, shutdown). */
  private doneWait: { promise: Promise<void>; resolve: () => void } | null = null;

  constructor(
    private readonly dispatcher: OutboxDispatcher,
    readonly delivery: ClaimedDelivery,
    readonly handler: RegisteredHandler,
  ) {
    this.lease = delivery.lease;
  }

  /** The keeper could not keep the lease. */
  lose(error: LeaseLostError): void {
    this.dispatcher.slotLost(this, error);
  }

  /** Stops the run from outside: it ends at once with `reason` as its failure. */
  interrupt(reason: unknown): void {
    if (this.interruptedBy !== undefined || this.finished) return;
    this.interruptedBy = reason;
    this.controller?.abort(reason);
    // As a rejection would: after the current job, so a loop interrupting runs is not reentered.
    queueMicrotask(() => this.dispatcher.finish(this, reason, true));
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
    this.dispatcher.acked(this);
  }

  /** The ack was refused (lease lost) or failed (`PendingAck`). */
  reject(error: unknown): void {
    this.dispatcher.ackFailed(this, error);
  }
}

/**
 * What a handler sees of its run. `signal` is an own, enumerable accessor (so `{ ...ctx }` and
 * `toEqual` see it as on a plain object), and the AbortController behind it is only made when it
 * is read (making one costs ~5 µs). Every context shares one accessor descriptor: a getter
 * closure per context cost ~1.5 µs per delivery (the object's shape could not be shared).
 */
class RunContext implements OutboxHandlerContext {
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

/** A run given up on (timeout, lease lost, shutdown) whose handler has not settled yet. */
interface AbandonedRun {
  readonly slot: Slot;
  readonly reason: AbandonReason;
  /** Reported on the event stream (still running one turn after its signal was aborted). */
  reported: boolean;
}

/** How a handler run went, for the event stream (absent: the delivery never ran here). */
interface RunTiming {
  startedAt: number;
  durationMs: number;
}

/**
 * Claims deliveries for this process's handlers and runs them: leases renewed while a handler
 * runs, outcomes fenced by the store, retries with backoff, dead letters, graceful shutdown.
 *
 * Pipelined: a handler's slot frees when it returns; its outcome is written in the background
 * (acks batched), so the next claim never waits for the last one's acks. One timer renews every
 * running lease and one timer enforces every handler timeout.
 */
@Injectable()
export class OutboxDispatcher implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('OutboxDispatcher');
  private readonly config: ResolvedOutboxOptions['dispatcher'];
  /** Running handlers. */
  private readonly runs = new Set<Slot>();
  /** Claimed ahead, waiting for a slot, oldest first. */
  private readonly waiting: Slot[] = [];
  /**
   * Deliveries whose run was given up (timeout, lease lost, shutdown) while the handler still
   * runs, until it settles. A new claim of one fails at once (see `enqueue`).
   */
  private readonly abandoned = new Map<string, AbandonedRun>();
  /** Runs reported abandoned whose handler has not settled yet. */
  private abandonedRunning = 0;
  private readonly keeper: LeaseKeeper;
  private readonly reporter: OutcomeReporter;
  private scheduler: SchedulerRegistry | null = null;
  private pollTimer: NodeJS.Timeout | null = null;
  private timeoutTimer: NodeJS.Timeout | null = null;
  private timeoutAt = Infinity;
  private unwatchAppends: (() => void) | null = null;
  private unwatchWakeups: (() => Promise<void>) | null = null;
  /**
   * A wake-up (a commit here or elsewhere) not yet served by a claim started after it. While a
   * claim is in flight or no slot is free it waits here, so a burst of wake-ups costs one claim
   * round when capacity frees, never a queue of polls.
   */
  private wakePending = false;
  private wakeScheduled = false;
  /** A poll is scheduled for the next turn (one serves every run that ended in this one). */
  private pollScheduled = false;
  private cleanupTimer: NodeJS.Timeout | null = null;
  private cleaning: Promise<void> | null = null;
  private readonly polls = new Set<Promise<void>>();
  /** Handler slots promised to claims in flight. */
  private reserved = 0;
  private state: DispatcherState = 'idle';
  private paused = false;
  /** The last claim came back full: more is waiting. */
  private morePending = false;
  /** Outcomes written so far (drain compares it across a claim). */
  private outcomesWritten = 0;
  /** A claim was skipped because too many outcomes wait to be written. */
  private heldBack = false;
  /** The last store error met while writing outcomes (a batch shares one). */
  private lastOutcomeError: unknown = null;
  private consecutiveStoreErrors = 0;
  private backoffUntil = 0;
  private readonly counters = {
    claimed: 0,
    succeeded: 0,
    failed: 0,
    retried: 0,
    deadLettered: 0,
    leaseLost: 0,
    abandoned: 0,
    storeErrors: 0,
    wakeups: 0,
    wakeupClaims: 0,
    lastPollAt: null as Date | null,
    lastStoreError: null as string | null,
  };

  constructor(
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    @Inject(OUTBOX_RESOLVED_OPTIONS) private readonly options: ResolvedOutboxOptions,
    private readonly registry: OutboxHandlerRegistry,
    private readonly moduleRef: ModuleRef,
    /** What happens is reported here (logs and metrics listen); see docs/monitoring.md. */
    @Optional() private readonly events: OutboxEvents = new OutboxEvents(),
    @Optional() @Inject(OUTBOX_TRACING) private readonly tracing: OutboxTracing | null = null,
  ) {
    this.config = options.dispatcher;
    this.keeper = new LeaseKeeper(store, this.config.leaseMs, (lease, error) =>
      this.logger.warn(OutboxMessages.renewFailed(lease.deliveryId, error)),
    );
    this.reporter = new OutcomeReporter(store, () => {
      this.outcomesWritten++;
      // A claim held back by unwritten outcomes goes as soon as they are written.
      if (this.heldBack && this.reporter.backlog <= this.maxBacklog) {
        this.heldBack = false;
        this.pollSoon();
      }
    });
  }

  /** This worker's id. */
  get workerId(): string {
    return this.config.workerId;
  }

  onApplicationBootstrap(): void {
    if (this.config.enabled) this.start();
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.stop();
  }

  /** Starts polling (done at bootstrap unless `dispatcher.enabled` is false). */
  start(): void {
    if (this.state === 'running') return;
    this.scheduler = this.resolveScheduler();
    this.state = 'running';
    const handlers = this.registry.all();
    if (handlers.length === 0) this.logger.warn(OutboxMessages.noHandlers());
    this.logger.log(
      OutboxMessages.dispatcherStarted(
        this.workerId,
        handlers.length,
        new Set(handlers.flatMap((h) => h.types)).size,
      ),
    );
    // Events committed by this process are claimed at once, not on the next tick; those of
    // other processes as soon as their signal arrives (docs/wakeups.md).
    this.unwatchAppends = this.store.onAppended?.(() => this.wake(false)) ?? null;
    if (this.config.wakeups) {
      this.unwatchWakeups = this.store.onWakeup?.(() => this.wake(true)) ?? null;
    }
    this.pollTimer = setInterval(() => this.poll(), this.config.pollInterval);
    this.scheduler.addInterval(OUTBOX_DISPATCHER_INTERVAL, this.pollTimer);
    const { cleanupIntervalMs } = this.options.retention;
    if (cleanupIntervalMs > 0) {
      this.cleanupTimer = setInterval(() => void this.cleanup(), cleanupIntervalMs);
      this.scheduler.addInterval(OUTBOX_CLEANUP_INTERVAL, this.cleanupTimer);
    }
    this.poll();
  }

  /**
   * Stops claiming, waits up to `shutdownTimeoutMs` for running handlers and the outcomes they
   * report, then aborts the signals of handlers still running. Deliveries claimed but not
   * started are released.
   */
  async stop(): Promise<void> {
    if (this.state !== 'running') return;
    this.state = 'stopping';
    this.unwatchAppends?.();
    this.unwatchAppends = null;
    const unwatched = this.unwatchWakeups?.().catch(() => undefined);
    this.unwatchWakeups = null;
    this.wakePending = false;
    for (const [name, timer] of [
      [OUTBOX_DISPATCHER_INTERVAL, this.pollTimer],
      [OUTBOX_CLEANUP_INTERVAL, this.cleanupTimer],
    ] as const) {
      if (!timer) continue;
      clearInterval(timer);
      if (this.scheduler?.doesExist('interval', name)) this.scheduler.deleteInterval(name);
    }
    this.pollTimer = this.cleanupTimer = null;
    // One deadline for all: a claim stuck on a dead connection must not hang shutdown either.
    const deadline = performance.now() + this.config.shutdownTimeoutMs;
    const claimsDone = await settleWithin(Promise.all(this.polls), deadline);
    // Claimed but not started: back to the store for another worker, at once.
    const unstarted = this.waiting.splice(0);
    for (const w of unstarted) this.keeper.release(w);
    await settleWithin(Promise.all(unstarted.map((w) => this.release(w.delivery.lease))), deadline);
    const settled =
      claimsDone &&
      (await settleWithin(Promise.allSettled([...this.runs].map((r) => r.done())), deadline));
    if (!settled) {
      this.logger.warn(
        OutboxMessages.shutdownTimeout(this.runs.size, this.config.shutdownTimeoutMs),
      );
      for (const run of this.runs) run.interrupt(new OutboxShutdownError());
    }
    await settleWithin(this.reporter.settled(), Math.max(deadline, performance.now() + 1_000));
    // A running retention batch finishes before the store's connections close.
    if (this.cleaning)
      await settleWithin(this.cleaning, Math.max(deadline, performance.now() + 1_000));
    if (unwatched) await settleWithin(unwatched, Math.max(deadline, performance.now() + 1_000));
    this.keeper.stop();
    this.clearTimeoutTimer();
    this.state = 'idle';
  }

  /** Stops claiming new deliveries; running handlers finish. */
  pause(): void {
    this.paused = true;
  }

  resume(): void {
    this.paused = false;
    this.poll();
  }

  stats(): OutboxDispatcherStats {
    return {
      workerId: this.workerId,
      running: this.state === 'running',
      paused: this.paused,
      inFlight: this.runs.size,
      abandonedRunning: this.abandonedRunning,
      ...this.counters,
    };
  }

  /**
   * Claims and runs deliveries until none is due (retries scheduled later are left for later),
   * and returns once every outcome is written. Works whether or not the dispatcher is started;
   * meant for your own tests. Deliveries another run still holds (a lease this worker lost, or
   * another worker's) are waited for until their lease ends and they can be claimed.
   */
  async drain(options: { maxRounds?: number } = {}): Promise<void> {
    const maxRounds = options.maxRounds ?? 1_000_000;
    for (let round = 0; round < maxRounds; round++) {
      const free = this.freeSlots();
      // Outcomes written while the claim below is on its way free keys the claim could not see.
      const writtenBefore = this.outcomesWritten;
      let claimed = 0;
      if (free > 0) {
        // Reserve the slots as poll() does, so the poll loop cannot claim them meanwhile.
        const limit = Math.min(this.config.batchSize, free);
        this.reserved += limit;
        try {
          claimed = await this.claimOnce(limit);
        } finally {
          this.reserved -= limit;
        }
      }
      if (claimed > 0) continue;
      const busy = [...[...this.runs].map((r) => r.done()), ...this.polls];
      if (busy.length > 0) {
        // Something still runs (ours or the poll loop's): wait for one to end, then look again.
        await Promise.race(busy);
        continue;
      }
      if (this.reporter.backlog > 0) {
        // Outcomes still on their way hold keys (a key's next event waits for its elder's
        // outcome): once written, there may be more to claim.
        await this.reporter.settled();
        continue;
      }
      if (this.outcomesWritten !== writtenBefore) continue;
      if (await this.leasedElsewhere()) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        continue;
      }
      return;
    }
  }

  /** Whether the store has leased deliveries of this worker's types (held by a run elsewhere). */
  private async leasedElsewhere(): Promise<boolean> {
    const types = new Set(this.registry.subscriptions().flatMap((s) => s.types));
    try {
      const { byType } = await this.store.stats();
      return Object.entries(byType).some(([type, n]) => types.has(type) && n.leased > 0);
    } catch {
      return false;
    }
  }

  private resolveScheduler(): SchedulerRegistry {
    let registryClass: typeof SchedulerRegistry;
    try {
      registryClass = (require('@nestjs/schedule') as typeof import('@nestjs/schedule'))
        .SchedulerRegistry;
    } catch {
      throw new OutboxOptionsError('dispatcher', OutboxMessages.missingScheduler());
    }
    try {
      return this.moduleRef.get(registryClass, { strict: false });
    } catch {
      throw new OutboxOptionsError('dispatcher', OutboxMessages.missingScheduler());
    }
  }

  /** Outcomes allowed to wait for their write before claiming pauses (acks go in batches). */
  private get maxBacklog(): number {
    return 4 * Math.max(this.config.concurrency, this.config.batchSize);
  }

  /**
   * Deliveries a claim may ask for now: free handler slots plus one batch claimed ahead, so a
   * slot that frees starts its next delivery at once instead of after a claim round trip.
   */
  private freeSlots(): number {
    const ahead = this.config.concurrency + (MAX_CLAIMS_IN_FLIGHT - 1) * this.config.batchSize;
    return ahead - this.runs.size - this.waiting.length - this.reserved;
  }

  /**
   * A hint that there may be new work: served on the next turn by a claim, unless a claim is in
   * flight (it may have read before the commit, so the hint is served when it returns) or no
   * slot is free (served when one frees). `remote`: a signal from another process (or the
   * subscription reconnecting), counted in `stats().wakeups`.
   */
  private wake(remote: boolean): void {
    if (remote) this.counters.wakeups++;
    if (this.state !== 'running') return;
    this.wakePending = true;
    if (this.wakeScheduled) return;
    this.wakeScheduled = true;
    setImmediate(() => {
      this.wakeScheduled = false;
      this.serveWake();
    });
  }

  /**
   * Polls on the next turn, once however many runs asked in this one; that poll claims as often
   * as the free slots allow (as many separate polls would).
   */
  private pollSoon(): void {
    if (this.pollScheduled) return;
    this.pollScheduled = true;
    setImmediate(() => {
      this.pollScheduled = false;
      for (let size = -1; size !== this.polls.size;) {
        size = this.polls.size;
        this.poll();
      }
    });
  }

  private serveWake(): void {
    if (this.wakePending && this.polls.size === 0) this.poll();
  }

  /**
   * Starts a claim for the free handler slots and one batch ahead. Up to two claims may be in
   * flight, so slots that free up while one claim waits on the store are refilled without waiting
   * for it; slots are reserved while a claim runs, so the dispatcher never runs more than
   * `concurrency` handlers nor holds more than one batch waiting for a slot. Outcomes
   * not yet written hold the next claim back once they exceed four batches (a slow store is not
   * handed more work than it can take); the claim goes as soon as they are written.
   */
  private poll(): void {
    if (this.state !== 'running' || this.paused) return;
    if (performance.now() < this.backoffUntil || this.polls.size >= MAX_CLAIMS_IN_FLIGHT) return;
    if (this.reporter.backlog > this.maxBacklog) {
      this.heldBack = true;
      return;
    }
    const limit = Math.min(this.config.batchSize, this.freeSlots());
    // A second claim only for a worthwhile share of the slots, not one at a time.
    if (limit <= 0 || (this.polls.size > 0 && limit < Math.ceil(this.config.batchSize / 2))) return;
    this.reserved += limit;
    // This claim reads after every wake-up so far: it serves them.
    if (this.wakePending) {
      this.wakePending = false;
      this.counters.wakeupClaims++;
    }
    const poll: Promise<void> = this.claimOnce(limit)
      .then((claimed) => {
        // A full batch means more is waiting: claim again at once, not on the next tick.
        if (claimed >= limit) this.pollSoon();
      })
      .finally(() => {
        this.reserved -= limit;
        this.polls.delete(poll);
        if (this.wakePending) setImmediate(() => this.serveWake());
      });
    this.polls.add(poll);
  }

  /** Claims up to `limit` deliveries and launches them; returns how many it claimed. */
  private async claimOnce(
    limit = Math.min(this.config.batchSize, this.config.concurrency),
  ): Promise<number> {
    const subscriptions = this.registry.subscriptions();
    if (subscriptions.length === 0 || limit <= 0) return 0;
    let claimed: ClaimedDelivery[];
    const sentAt = performance.now();
    try {
      claimed = await this.store.claim({
        workerId: this.workerId,
        handlers: subscriptions,
        limit,
        leaseMs: this.config.leaseMs,
      });
      this.counters.lastPollAt = new Date();
      this.consecutiveStoreErrors = 0;
      this.backoffUntil = 0;
    } catch (error) {
      this.storeFailed('claim', error);
      return 0;
    }
    this.morePending = claimed.length >= limit;
    this.counters.claimed += claimed.length;
    if (this.events.wants('claimed')) {
      for (const c of claimed) this.events.emit(this.observe('claimed', c));
    }
    if (this.state === 'stopping') {
      await Promise.all(claimed.map((c) => this.release(c.lease)));
      return 0;
    }
    for (const delivery of claimed) this.enqueue(delivery, sentAt);
    this.startWaiting();
    return claimed.length;
  }

  /** Keeps the lease of a claimed delivery and puts it in line for a handler slot. */
  private enqueue(delivery: ClaimedDelivery, sentAt: number): void {
    const handler = this.registry.get(delivery.handler);
    if (!handler) {
      void this.release(delivery.lease);
      return;
    }
    const maxAttempts = handler.maxAttempts ?? this.config.maxAttempts;
    if (delivery.attempt > maxAttempts) {
      // Earlier attempts died with their worker (crash or lost lease) without reporting.
      const error = new OutboxError(
        `No outcome reported by ${delivery.attempt - 1} attempt(s); the worker running them stopped`,
      );
      this.report(delivery, delivery.lease, handler, { failed: true, failure: error }, null);
      return;
    }
    // A run given up on (timeout, lease lost) still executes, its handler ignoring its signal:
    // never start the delivery beside it. This attempt fails instead (retried with backoff, or
    // dead-lettered once exhausted), so a handler that never settles cannot hold its key.
    const previous = this.abandoned.get(delivery.id);
    if (previous) {
      const error = new AbandonedRunError(handler.name, previous.reason, previous.slot.timeoutMs);
      this.report(delivery, delivery.lease, handler, { failed: true, failure: error }, null);
      return;
    }
    const slot = this.keeper.add(new Slot(this, delivery, handler), sentAt);
    this.waiting.push(slot);
  }

  /** The keeper lost a kept lease: stop the run, or drop the delivery if it never started. */
  slotLost(slot: Slot, error: LeaseLostError): void {
    if (slot.running) return slot.interrupt(error);
    // Lost while waiting for a slot: it never started, so there is nothing to stop.
    const index = this.waiting.indexOf(slot);
    if (index >= 0) this.waiting.splice(index, 1);
    this.leaseLost(slot.delivery, 'renewal');
  }

  /** Starts waiting deliveries while handler slots are free (not once shutdown began). */
  private startWaiting(): void {
    while (
      this.state !== 'stopping' &&
      this.runs.size < this.config.concurrency &&
      this.waiting.length > 0
    ) {
      this.launch(this.waiting.shift()!);
    }
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
    const context = new RunContext(slot, this.workerId);
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
   * A run ended: its handler settled, or it was interrupted (first one wins). Releases its lease,
   * hands its outcome to the reporter and frees its slot.
   */
  finish(slot: Slot, failure: unknown, failed: boolean): void {
    if (slot.finished) return;
    slot.finished = true;
    try {
      slot.durationMs = performance.now() - slot.started;
      this.keeper.release(slot);
      const { delivery } = slot;
      const interrupted = slot.interruptedBy !== undefined && failure === slot.interruptedBy;
      if (failed && interrupted) this.abandon(slot);
      const result: RunResult = failed
        ? { failed: true, failure, interruptedBy: slot.interruptedBy }
        : SUCCEEDED;
      this.report(delivery, slot.lease, slot.handler, result, slot);
    } catch (error) {
      this.logger.error(`Unexpected dispatcher error: ${String(error)}`);
    } finally {
      this.runs.delete(slot);
      this.startWaiting();
      // Work was left behind when the last claim came back full: fetch it now, not next tick.
      if (this.morePending) this.pollSoon();
      else if (this.wakePending) this.serveWake();
      slot.settleDone();
    }
  }

  /**
   * Remembers a run the dispatcher stopped waiting for until its handler really settles; one
   * still running on the next turn (its handler ignores its aborted signal) is reported.
   */
  private abandon(slot: Slot): void {
    const reason: AbandonReason =
      slot.interruptedBy instanceof HandlerTimeoutError
        ? 'timeout'
        : slot.interruptedBy instanceof LeaseLostError
          ? 'lease-lost'
          : 'shutdown';
    const run: AbandonedRun = { slot, reason, reported: false };
    this.abandoned.set(slot.delivery.id, run);
    slot.invocation!.then(
      () => this.abandonedSettled(run, false),
      () => this.abandonedSettled(run, true),
    );
    // A handler honouring its signal has settled by then: only one that ignores it is reported.
    setImmediate(() => {
      if (this.abandoned.get(slot.delivery.id) !== run) return;
      run.reported = true;
      this.counters.abandoned++;
      this.abandonedRunning++;
      if (this.events.wants('abandoned')) {
        this.events.emit({
          ...this.observe('abandoned', slot.delivery),
          reason,
          timeoutMs: slot.timeoutMs,
          startedAt: slot.startedAt,
        });
      }
    });
  }

  /** An abandoned run's handler settled at last: the delivery may start here again. */
  private abandonedSettled(run: AbandonedRun, failed: boolean): void {
    const { delivery } = run.slot;
    if (this.abandoned.get(delivery.id) === run) this.abandoned.delete(delivery.id);
    if (!run.reported) return;
    this.abandonedRunning--;
    if (this.events.wants('abandoned-settled')) {
      this.events.emit({
        ...this.observe('abandoned-settled', delivery),
        durationMs: performance.now() - run.slot.started,
        failed,
      });
    }
  }

  /**
   * Decides what happens to the delivery and has the reporter write it in the background; each
   * outcome, once written, is reported on the event stream (the logs and metrics listen there).
   */
  private report(
    delivery: ClaimedDelivery,
    lease: Lease,
    handler: RegisteredHandler,
    result: RunResult,
    timing: RunTiming | null,
  ): void {
    if (!result.failed && timing instanceof Slot) {
      // Succeeded (the common case): no policy to consult.
      this.reporter.enqueueAck(timing);
      return;
    }
    const outcome = decideOutcome(result, {
      attempt: delivery.attempt,
      maxAttempts: handler.maxAttempts ?? this.config.maxAttempts,
      backoff: { ...this.config.backoff, ...handler.backoff },
      retryIf: handler.retryIf,
      isShutdown: (reason) => reason instanceof OutboxShutdownError,
    });
    if (outcome.kind === 'lost') {
      this.leaseLost(delivery, 'renewal');
      return;
    }
    if (outcome.kind === 'abandoned') return;
    if (outcome.kind === 'ack') {
      this.reporter.ack(lease).then(
        () => this.delivered(delivery, timing),
        (error) => this.reportFailed(handler, delivery, 'ack', error),
      );
      return;
    }
    this.counters.failed++;
    const error = this.describeError(result.failure, delivery.attempt);
    if (outcome.kind === 'dead') {
      this.reporter.deadLetter(lease, outcome.reason, error).then(
        () => {
          this.counters.deadLettered++;
          if (this.events.wants('dead-lettered')) {
            this.events.emit({
              ...this.observe('dead-lettered', delivery),
              ...(timing
                ? {
                    startedAt: timing.startedAt,
                    durationMs: timing.durationMs,
                    availableAt: delivery.event.availableAt,
                  }
                : {}),
              reason: outcome.reason,
              error: observedError(result.failure),
            });
          }
        },
        (e) => this.reportFailed(handler, delivery, 'retry', e),
      );
      return;
    }
    this.reporter.retry(lease, outcome.delayMs, error).then(
      () => {
        this.counters.retried++;
        if (this.events.wants('retry-scheduled')) {
          this.events.emit({
            ...this.observe('retry-scheduled', delivery),
            startedAt: timing ? timing.startedAt : Date.now(),
            durationMs: timing ? timing.durationMs : 0,
            availableAt: delivery.event.availableAt,
            delayMs: outcome.delayMs,
            error: observedError(result.failure),
          });
        }
      },
      (e) => this.reportFailed(handler, delivery, 'retry', e),
    );
  }

  /** The slot's ack was written. */
  acked(slot: Slot): void {
    this.delivered(slot.delivery, slot);
  }

  /** The slot's ack was refused (lease lost) or failed. */
  ackFailed(slot: Slot, error: unknown): void {
    this.reportFailed(slot.handler, slot.delivery, 'ack', error);
  }

  private delivered(delivery: ClaimedDelivery, timing: RunTiming | null): void {
    this.counters.succeeded++;
    if (!this.events.wants('delivered')) return;
    const { event } = delivery;
    this.events.emit({
      kind: 'delivered',
      eventId: event.id,
      type: event.type,
      deliveryId: delivery.id,
      handler: delivery.handler,
      attempt: delivery.attempt,
      workerId: this.workerId,
      startedAt: timing ? timing.startedAt : Date.now(),
      durationMs: timing ? timing.durationMs : 0,
      availableAt: event.availableAt,
    });
  }

  /** What the event stream says about a delivery (ids and names, never the payload). */
  private observe<K extends OutboxObservationKind>(
    kind: K,
    delivery: ClaimedDelivery,
  ): DeliveryObservation & { kind: K } {
    return {
      kind,
      eventId: delivery.event.id,
      type: delivery.event.type,
      deliveryId: delivery.id,
      handler: delivery.handler,
      attempt: delivery.attempt,
      workerId: this.workerId,
    };
  }

  private leaseLost(delivery: ClaimedDelivery, during: 'renewal' | 'outcome'): void {
    this.counters.leaseLost++;
    if (this.events.wants('lease-lost')) {
      this.events.emit({ ...this.observe('lease-lost', delivery), during });
    }
  }

  /** A lost lease or store error discards the outcome (the delivery is redelivered later). */
  private reportFailed(
    handler: RegisteredHandler,
    delivery: ClaimedDelivery,
    operation: string,
    error: unknown,
  ): void {
    if (error instanceof LeaseLostError) {
      this.leaseLost(delivery, 'outcome');
    } else if (error !== this.lastOutcomeError) {
      // One failed batch rejects each of its acks with the same error: one store error, one line.
      this.lastOutcomeError = error;
      this.storeFailed(operation, error);
    }
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

  private storeFailed(operation: string, error: unknown): void {
    this.counters.storeErrors++;
    this.counters.lastStoreError =
      error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    this.consecutiveStoreErrors++;
    const delay = Math.min(
      this.config.storeErrorMaxBackoffMs,
      this.config.storeErrorBackoffMs * 2 ** Math.min(20, this.consecutiveStoreErrors - 1),
    );
    this.backoffUntil = performance.now() + delay;
    if (this.events.wants('store-error')) {
      this.events.emit({
        kind: 'store-error',
        operation,
        error: observedError(error),
        retryInMs: delay,
        workerId: this.workerId,
      });
    }
  }

  private async release(lease: Lease): Promise<void> {
    try {
      await this.store.release(lease);
    } catch (error) {
      this.logger.warn(OutboxMessages.releaseFailed(lease.deliveryId, error));
    }
  }

  private describeError(failure: unknown, attempt: number): DeliveryErrorInput {
    const max = this.options.limits.errorMaxLength;
    // NUL cannot be stored in PostgreSQL text; an error that could not be recorded is worse.
    const clean = (text: unknown) => String(text ?? '').replaceAll('\u0000', '');
    const name = clean(failure instanceof Error ? failure.name : typeof failure) || 'Error';
    const message = clean(failure instanceof Error ? failure.message : safeString(failure));
    return {
      name: name.slice(0, 255),
      message: message.slice(0, max),
      attempt,
      workerId: this.workerId,
    };
  }

  /**
   * Retention: one store call deletes a bounded batch; while batches come back full (the append
   * rate outruns one batch per interval) it calls again, within a time budget, so storage stays
   * bounded at any sustainable rate without one long transaction.
   */
  private cleanup(): Promise<void> {
    this.cleaning ??= this.cleanupRun().finally(() => (this.cleaning = null));
    return this.cleaning;
  }

  private async cleanupRun(): Promise<void> {
    const { deliveredMs, deadLetterMs, batchSize } = this.options.retention;
    const until = performance.now() + CLEANUP_BUDGET_MS;
    const total = { events: 0, deadLetters: 0 };
    try {
      for (;;) {
        const result = await this.store.cleanup({
          deliveredRetentionMs: deliveredMs,
          deadLetterRetentionMs: deadLetterMs,
          batchSize,
        });
        total.events += result.events;
        total.deadLetters += result.deadLetters;
        const full = result.events >= batchSize || result.deadLetters >= batchSize;
        if (!full || performance.now() >= until || this.state !== 'running') break;
      }
    } catch (error) {
      this.logger.warn(OutboxMessages.cleanupFailed(error));
    }
    if (total.events + total.deadLetters > 0) {
      this.logger.debug(OutboxMessages.cleanupDone(total.events, total.deadLetters));
    }
  }
}

/** Resolves true when `promise` settles before `deadline` (epoch ms), false otherwise. */
async function settleWithin(promise: Promise<unknown>, deadline: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), Math.max(0, deadline - performance.now()));
  });
  try {
    return await Promise.race([
      promise.then(
        () => true,
        () => true,
      ),
      timedOut,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

function observedError(error: unknown): ObservedError {
  return error instanceof Error
    ? { name: error.name, message: error.message }
    : { name: typeof error, message: safeString(error) };
}

function safeString(value: unknown): string {
  try {
    return typeof value === 'string' ? value : (JSON.stringify(value) ?? String(value));
  } catch {
    return String(value);
  }
}
