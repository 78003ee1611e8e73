/**
 * The dispatcher: claims deliveries for this process's handlers and runs them. This file is the
 * facade (Nest lifecycle, public methods, shutdown, `drain`) and wires the parts, each of which
 * owns one job and its state:
 *
 * - `claim-loop.ts` — the claim loop's state, one union (`ClaimLoopState`), and `next`, its only
 *   transition function: the one place that decides to claim again (after a wake-up, a full
 *   claim, a freed slot, written outcomes).
 * - `claim-scheduler.ts` — carries those decisions out: the poll tick, the wake-up subscriptions,
 *   how much to claim (free slots plus a batch ahead), claims in flight, store-error backoff.
 * - `handler-runs.ts` — the deliveries held: waiting for a slot, running under a timeout, ended
 *   by the handler or interrupted; `run-slot.ts` is one delivery's object and its handler's
 *   context; `abandoned-runs.ts` keeps interrupted handlers that still execute.
 * - `run-outcomes.ts` — what follows a run: `decideOutcome` (pure), the write handed to
 *   `outcome-reporter.ts` (acks batched), counters and the event stream.
 * - `lease-keeper.ts` — renews every held lease from one timer; a lease it cannot keep stops
 *   its run.
 * - `retention-cleaner.ts` — deletes delivered events and dead letters past retention.
 *
 * One delivery's path: claim (scheduler) → admit and wait (runs, lease kept) → run → finish
 * (runs) → outcome decided and written (outcomes, reporter) → slot freed (scheduler).
 */
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
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxShutdownError } from '../errors/outbox-shutdown.error';
import { ResolvedOutboxOptions } from '../interfaces/outbox-module-options.interface';
import { ClaimedDelivery, Lease, OutboxStore } from '../interfaces/outbox-store.interface';
import { OUTBOX_RESOLVED_OPTIONS, OUTBOX_STORE } from '../outbox.constants';
import { OutboxHandlerRegistry } from '../outbox-handler.registry';
import { OutboxMessages } from '../outbox.messages';
import { OUTBOX_TRACING } from '../observability/observability.constants';
import { OutboxEvents } from '../observability/outbox-events';
import type { OutboxTracing } from '../observability/outbox-tracing';
import { AbandonedRuns } from './abandoned-runs';
import { ClaimScheduler } from './claim-scheduler';
import { HandlerRuns } from './handler-runs';
import { LeaseKeeper } from './lease-keeper';
import { newCounters, OutboxDispatcherStats } from './outbox-dispatcher.stats';
import { OutcomeReporter } from './outcome-reporter';
import { RetentionCleaner } from './retention-cleaner';
import { RunOutcomes } from './run-outcomes';

export { OutboxShutdownError };

/** Where the dispatcher is in its life. */
type DispatcherState = 'idle' | 'running' | 'stopping';

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
  private readonly counters = newCounters();
  private readonly keeper: LeaseKeeper;
  private readonly reporter: OutcomeReporter;
  private readonly outcomes: RunOutcomes;
  private readonly runs: HandlerRuns;
  private readonly claims: ClaimScheduler;
  private readonly cleaner: RetentionCleaner;
  private state: DispatcherState = 'idle';
  /** Outcomes written so far (drain compares it across a claim). */
  private outcomesWritten = 0;

  constructor(
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    @Inject(OUTBOX_RESOLVED_OPTIONS) options: ResolvedOutboxOptions,
    private readonly registry: OutboxHandlerRegistry,
    private readonly moduleRef: ModuleRef,
    /** What happens is reported here (logs and metrics listen); see docs/monitoring.md. */
    @Optional() private readonly events: OutboxEvents = new OutboxEvents(),
    @Optional() @Inject(OUTBOX_TRACING) tracing: OutboxTracing | null = null,
  ) {
    this.config = options.dispatcher;
    this.keeper = new LeaseKeeper(store, this.config.leaseMs, (lease, error) =>
      this.logger.warn(OutboxMessages.renewFailed(lease.deliveryId, error)),
    );
    this.reporter = new OutcomeReporter(store, (freedKey) => {
      this.outcomesWritten++;
      this.claims.outcomeWritten(freedKey);
    });
    this.claims = new ClaimScheduler(
      {
        claim: (limit) => this.claimOnce(limit),
        held: () => this.runs.held,
        backlog: () => this.reporter.backlog,
      },
      this.config,
      this.counters,
    );
    this.outcomes = new RunOutcomes(this.reporter, options, events, this.counters, () =>
      this.claims.backOff(),
    );
    const abandoned = new AbandonedRuns(this.outcomes, events, this.counters);
    this.runs = new HandlerRuns(options, registry, this.keeper, this.outcomes, abandoned, tracing, {
      stopping: () => this.state === 'stopping',
      slotFreed: () => this.claims.on('slot-freed'),
      release: (lease) => this.release(lease),
    });
    this.cleaner = new RetentionCleaner(store, options.retention);
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
    const scheduler = this.resolveScheduler();
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
    this.cleaner.start(scheduler);
    this.claims.start(scheduler, this.store);
  }

  /**
   * Stops claiming, waits up to `shutdownTimeoutMs` for running handlers and the outcomes they
   * report, then aborts the signals of handlers still running. Deliveries claimed but not
   * started are released.
   */
  async stop(): Promise<void> {
    if (this.state !== 'running') return;
    this.state = 'stopping';
    const unwatched = this.claims.stop();
    this.cleaner.stop();
    // One deadline for all: a claim stuck on a dead connection must not hang shutdown either.
    const deadline = performance.now() + this.config.shutdownTimeoutMs;
    const claimsDone = await settleWithin(Promise.all(this.claims.inFlight), deadline);
    // Claimed but not started: back to the store for another worker, at once.
    const unstarted = this.runs.takeWaiting();
    await settleWithin(Promise.all(unstarted.map((w) => this.release(w.delivery.lease))), deadline);
    const settled =
      claimsDone && (await settleWithin(Promise.allSettled(this.runs.runsDone()), deadline));
    if (!settled) {
      this.logger.warn(
        OutboxMessages.shutdownTimeout(this.runs.running, this.config.shutdownTimeoutMs),
      );
      this.runs.interruptAll(new OutboxShutdownError());
    }
    const later = () => Math.max(deadline, performance.now() + 1_000);
    await settleWithin(this.reporter.settled(), later());
    // A running retention batch finishes before the store's connections close.
    const cleaning = this.cleaner.inProgress;
    if (cleaning) await settleWithin(cleaning, later());
    if (unwatched) await settleWithin(unwatched, later());
    this.keeper.stop();
    this.runs.stop();
    this.state = 'idle';
  }

  /** Stops claiming new deliveries; running handlers finish. */
  pause(): void {
    this.claims.on('pause');
  }

  resume(): void {
    this.claims.on('resume');
  }

  stats(): OutboxDispatcherStats {
    return {
      workerId: this.workerId,
      running: this.state === 'running',
      paused: this.claims.paused,
      inFlight: this.runs.running,
      abandonedRunning: this.runs.abandoned.running,
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
      // Outcomes written while the claim below is on its way free keys the claim could not see.
      const writtenBefore = this.outcomesWritten;
      // Its slots reserved as the claim loop's are, so the loop cannot claim them meanwhile.
      const claimed = await this.claims.claimReserved();
      if (claimed > 0) continue;
      const busy = [...this.runs.runsDone(), ...this.claims.inFlight];
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
    } catch (error) {
      // Not installed: say so. Any other failure to load it (ERR_REQUIRE_ESM, …) is its own.
      const { code, message } = error as { code?: unknown; message?: unknown };
      if (code !== 'MODULE_NOT_FOUND' || !String(message).includes("'@nestjs/schedule'"))
        throw error;
      throw new OutboxOptionsError('dispatcher', OutboxMessages.schedulerNotInstalled());
    }
    try {
      return this.moduleRef.get(registryClass, { strict: false });
    } catch {
      throw new OutboxOptionsError('dispatcher', OutboxMessages.missingScheduler());
    }
  }

  /** Claims up to `limit` deliveries and launches them; returns how many it claimed. */
  private async claimOnce(limit: number): Promise<number> {
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
      this.claims.storeAnswered();
    } catch (error) {
      this.outcomes.storeFailed('claim', error);
      return 0;
    }
    this.claims.on(claimed.length >= limit ? 'claimed-full' : 'claimed-short');
    this.counters.claimed += claimed.length;
    if (this.events.wants('claimed')) {
      for (const c of claimed) this.events.emit(this.outcomes.observe('claimed', c));
    }
    if (this.state === 'stopping') {
      await Promise.all(claimed.map((c) => this.release(c.lease)));
      return 0;
    }
    for (const delivery of claimed) this.runs.admit(delivery, sentAt);
    this.runs.startWaiting();
    return claimed.length;
  }

  private async release(lease: Lease): Promise<void> {
    try {
      await this.store.release(lease);
    } catch (error) {
      this.logger.warn(OutboxMessages.releaseFailed(lease.deliveryId, error));
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
