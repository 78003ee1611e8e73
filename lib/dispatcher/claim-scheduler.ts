import type { SchedulerRegistry } from '@nestjs/schedule';
import { ResolvedOutboxOptions } from '../interfaces/outbox-module-options.interface';
import { OutboxStore } from '../interfaces/outbox-store.interface';
import { OUTBOX_DISPATCHER_INTERVAL } from '../outbox.constants';
import { ClaimLoopAction, ClaimLoopEvent, ClaimLoopState, next } from './claim-loop';
import { DispatcherCounters } from './outbox-dispatcher.stats';

/** Claims one worker may have in flight at once (see `ClaimScheduler.claim`). */
const MAX_CLAIMS_IN_FLIGHT = 3;

/** What the scheduler claims for, and what bounds it. */
export interface ClaimTarget {
  /** Claims up to `limit` deliveries and puts them in line for a slot; how many it claimed. */
  claim(limit: number): Promise<number>;
  /** Deliveries held here: running, or waiting for a slot. */
  held(): number;
  /** Outcomes not yet written. */
  backlog(): number;
}

/**
 * Decides when to claim: on the poll tick, after a wake-up, when a slot frees after a full claim,
 * when written outcomes make room or free a key; and how much: the free slots plus one batch
 * ahead, up to three claims in flight, none during a store-error backoff (what is owed meanwhile
 * is claimed when it ends).
 */
export class ClaimScheduler {
  private state: ClaimLoopState = { kind: 'stopped', paused: false };
  /** The one step deferred to the next turn (`queue-owed`, `queue-more`), if any. */
  private queued: 'owed' | 'more' | null = null;
  private readonly polls = new Set<Promise<void>>();
  /** Handler slots promised to claims in flight. */
  private reserved = 0;
  private consecutiveStoreErrors = 0;
  private backoffUntil = 0;
  private pollTimer: NodeJS.Timeout | null = null;
  /** Serves what is owed when the store-error backoff ends (see `claim`). */
  private backoffTimer: NodeJS.Timeout | null = null;
  private registry: SchedulerRegistry | null = null;
  private unwatchAppends: (() => void) | null = null;
  private unwatchWakeups: (() => Promise<void>) | null = null;

  constructor(
    private readonly target: ClaimTarget,
    private readonly config: ResolvedOutboxOptions['dispatcher'],
    private readonly counters: DispatcherCounters,
  ) {}

  get paused(): boolean {
    return this.state.kind === 'stopped' ? this.state.paused : this.state.kind === 'paused';
  }

  /** Claims of the loop in flight (drain and shutdown wait for them). */
  get inFlight(): ReadonlySet<Promise<void>> {
    return this.polls;
  }

  /** Outcomes allowed to wait for their write before claiming pauses (acks go in batches). */
  get maxBacklog(): number {
    return 4 * Math.max(this.config.concurrency, this.config.batchSize);
  }

  /** Starts the poll tick and listens for wake-ups, then claims. */
  start(registry: SchedulerRegistry, store: OutboxStore): void {
    const { state, action } = next(this.state, 'start');
    this.state = state;
    this.registry = registry;
    // Events committed by this process are claimed at once, not on the next tick; those of
    // other processes as soon as their signal arrives (docs/wakeups.md).
    this.unwatchAppends = store.onAppended?.(() => this.wake(false)) ?? null;
    if (this.config.wakeups) {
      this.unwatchWakeups = store.onWakeup?.(() => this.wake(true)) ?? null;
    }
    this.pollTimer = setInterval(() => this.claim(), this.config.pollInterval);
    registry.addInterval(OUTBOX_DISPATCHER_INTERVAL, this.pollTimer);
    this.act(action);
  }

  /** Stops claiming; resolves once the wake-up subscription is closed. */
  stop(): Promise<void> | undefined {
    this.on('stop');
    this.unwatchAppends?.();
    this.unwatchAppends = null;
    const unwatched = this.unwatchWakeups?.().catch(() => undefined);
    this.unwatchWakeups = null;
    if (this.pollTimer) {
      clearInterval(this.pollTimer);
      if (this.registry?.doesExist('interval', OUTBOX_DISPATCHER_INTERVAL))
        this.registry.deleteInterval(OUTBOX_DISPATCHER_INTERVAL);
    }
    this.pollTimer = null;
    if (this.backoffTimer) clearTimeout(this.backoffTimer);
    this.backoffTimer = null;
    return unwatched;
  }

  /** Feeds an event through `next` and does what it says. */
  on(event: ClaimLoopEvent): void {
    const { state, action } = next(this.state, event);
    this.state = state;
    if (action !== null) this.act(action);
  }

  /**
   * An outcome was written: a claim held back for it may go; one that ended a keyed delivery
   * (`freedKey`) may have made the key's next event claimable (see `Owed.freed`).
   */
  outcomeWritten(freedKey: boolean): void {
    if (freedKey) this.on('key-freed');
    if (this.target.backlog() <= this.maxBacklog) this.on('backlog-ok');
  }

  /**
   * Deliveries a claim may ask for now: free handler slots plus one batch claimed ahead, so a
   * slot that frees starts its next delivery at once instead of after a claim round trip.
   */
  freeSlots(): number {
    const ahead = this.config.concurrency + (MAX_CLAIMS_IN_FLIGHT - 1) * this.config.batchSize;
    return ahead - this.target.held() - this.reserved;
  }

  /** A claim outside the loop (drain's), its slots reserved as the loop's are; how many it got. */
  async claimReserved(): Promise<number> {
    const free = this.freeSlots();
    if (free <= 0) return 0;
    const limit = Math.min(this.config.batchSize, free);
    this.reserved += limit;
    try {
      return await this.target.claim(limit);
    } finally {
      this.reserved -= limit;
    }
  }

  /** A claim succeeded: the store answers again. */
  storeAnswered(): void {
    this.consecutiveStoreErrors = 0;
    this.backoffUntil = 0;
  }

  /** A store call failed: claims wait, twice as long per failure in a row up to the cap. */
  backOff(): number {
    this.consecutiveStoreErrors++;
    const delay = Math.min(
      this.config.storeErrorMaxBackoffMs,
      this.config.storeErrorBackoffMs * 2 ** Math.min(20, this.consecutiveStoreErrors - 1),
    );
    this.backoffUntil = performance.now() + delay;
    return delay;
  }

  /**
   * A hint that there may be new work (see `Owed.wake`). `remote`: a signal from another process
   * (or the subscription reconnecting), counted in `stats().wakeups`.
   */
  private wake(remote: boolean): void {
    if (remote) this.counters.wakeups++;
    this.on('wake');
  }

  private act(action: ClaimLoopAction): void {
    switch (action) {
      case 'claim':
        return this.claim();
      case 'serve-owed':
        return this.serveOwed();
      case 'queue-owed':
        return this.queue('owed');
      case 'queue-more':
        return this.queue('more');
    }
  }

  /** One deferred step for the next turn; `more` covers `owed` (its first claim serves it). */
  private queue(step: 'owed' | 'more'): void {
    if (this.queued === 'more' || this.queued === step) return;
    const scheduled = this.queued !== null;
    this.queued = step;
    if (scheduled) return;
    setImmediate(() => {
      const queued = this.queued;
      this.queued = null;
      if (queued === 'more') this.claimAll();
      else this.serveOwed();
    });
  }

  /** One claim for what is owed (a wake-up, a freed key), unless a claim is already out. */
  private serveOwed(): void {
    if (this.state.kind === 'stopped' || this.polls.size > 0) return;
    const { owed } = this.state;
    if (owed.wake || owed.freed) this.claim();
  }

  /**
   * A claim held back by the store-error backoff: a wake-up or a freed key owed meanwhile is served
   * when the backoff ends, not on the next poll tick (which may be far off). One timer at a time.
   */
  private serveWhenBackedOff(ms: number): void {
    if (this.backoffTimer || this.state.kind !== 'claiming') return;
    const { owed } = this.state;
    if (!owed.wake && !owed.freed) return;
    this.backoffTimer = setTimeout(() => {
      this.backoffTimer = null;
      this.serveOwed();
    }, Math.ceil(ms));
    this.backoffTimer.unref?.();
  }

  private claimAll(): void {
    for (let size = -1; size !== this.polls.size;) {
      size = this.polls.size;
      this.claim();
    }
  }

  /**
   * Starts a claim for the free handler slots and one batch ahead. Several claims may be in
   * flight, so slots that free up while one claim waits on the store are refilled without waiting
   * for it; slots are reserved while a claim runs, so the dispatcher never runs more than
   * `concurrency` handlers nor holds more than it may claim ahead. Outcomes not yet written hold
   * the next claim back once they exceed four batches (a slow store is not handed more work than
   * it can take); the claim goes as soon as they are written.
   */
  private claim(): void {
    if (this.state.kind !== 'claiming') return;
    const now = performance.now();
    if (now < this.backoffUntil) return this.serveWhenBackedOff(this.backoffUntil - now);
    if (this.polls.size >= MAX_CLAIMS_IN_FLIGHT) return;
    if (this.target.backlog() > this.maxBacklog) return this.on('held-back');
    const { batchSize } = this.config;
    const limit = Math.min(batchSize, this.freeSlots());
    // A second claim only for a worthwhile share of the slots, not one at a time.
    if (limit <= 0 || (this.polls.size > 0 && limit < Math.ceil(batchSize / 2))) return;
    this.reserved += limit;
    if (this.state.owed.wake) this.counters.wakeupClaims++;
    this.on('claim-started');
    let full = false;
    const poll: Promise<void> = this.target
      .claim(limit)
      .then((claimed) => {
        full = claimed >= limit;
      })
      .finally(() => {
        this.reserved -= limit;
        this.polls.delete(poll);
        this.on(full ? 'claim-settled-full' : 'claim-settled');
      });
    this.polls.add(poll);
  }
}
