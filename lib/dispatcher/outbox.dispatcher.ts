import {
  BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  OnApplicationBootstrap,
} from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import type { SchedulerRegistry } from '@nestjs/schedule';
import { HandlerTimeoutError } from '../errors/handler-timeout.error';
import { LeaseLostError } from '../errors/lease-lost.error';
import { NonRetryableError } from '../errors/non-retryable.error';
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
import { backoffDelay } from './backoff';
import { OutboxDispatcherStats } from './outbox-dispatcher.stats';

/** Reason given to a handler's signal when the application shuts down under it. */
export class OutboxShutdownError extends OutboxError {
  constructor() {
    super('The application is shutting down');
  }
}

/** Claims one worker may have in flight at once (see `poll`). */
const MAX_CLAIMS_IN_FLIGHT = 2;

interface InFlight {
  promise: Promise<void>;
  abort: AbortController;
}

/**
 * Claims deliveries for this process's handlers and runs them: leases renewed while a handler
 * runs, outcomes fenced by the store, retries with backoff, dead letters, graceful shutdown.
 */
@Injectable()
export class OutboxDispatcher implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('OutboxDispatcher');
  private readonly config: ResolvedOutboxOptions['dispatcher'];
  private readonly inFlight = new Map<string, InFlight>();
  private scheduler: SchedulerRegistry | null = null;
  private pollTimer: NodeJS.Timeout | null = null;
  private unwatchAppends: (() => void) | null = null;
  private cleanupTimer: NodeJS.Timeout | null = null;
  private readonly polls = new Set<Promise<void>>();
  private readonly pendingAcks: Array<{
    lease: Lease;
    resolve: () => void;
    reject: (error: unknown) => void;
  }> = [];
  /** Handler slots promised to claims in flight. */
  private reserved = 0;
  private cleaning = false;
  private running = false;
  private stopping = false;
  private paused = false;
  private morePending = false;
  private consecutiveStoreErrors = 0;
  private backoffUntil = 0;
  private readonly counters = {
    claimed: 0,
    succeeded: 0,
    failed: 0,
    retried: 0,
    deadLettered: 0,
    leaseLost: 0,
    storeErrors: 0,
    lastPollAt: null as Date | null,
    lastStoreError: null as string | null,
  };

  constructor(
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    @Inject(OUTBOX_RESOLVED_OPTIONS) private readonly options: ResolvedOutboxOptions,
    private readonly registry: OutboxHandlerRegistry,
    private readonly moduleRef: ModuleRef,
  ) {
    this.config = options.dispatcher;
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
    if (this.running) return;
    this.scheduler = this.resolveScheduler();
    this.running = true;
    this.stopping = false;
    const handlers = this.registry.all();
    if (handlers.length === 0) this.logger.warn(OutboxMessages.noHandlers());
    this.logger.log(
      OutboxMessages.dispatcherStarted(
        this.workerId,
        handlers.length,
        new Set(handlers.flatMap((h) => h.types)).size,
      ),
    );
    // Events committed by this process are claimed at once, not on the next tick.
    this.unwatchAppends = this.store.onAppended?.(() => setImmediate(() => this.poll())) ?? null;
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
   * Stops claiming, waits up to `shutdownTimeoutMs` for running handlers, then aborts their
   * signals. Deliveries claimed but not started are released.
   */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.stopping = true;
    this.running = false;
    this.unwatchAppends?.();
    this.unwatchAppends = null;
    for (const [name, timer] of [
      [OUTBOX_DISPATCHER_INTERVAL, this.pollTimer],
      [OUTBOX_CLEANUP_INTERVAL, this.cleanupTimer],
    ] as const) {
      if (!timer) continue;
      clearInterval(timer);
      if (this.scheduler?.doesExist('interval', name)) this.scheduler.deleteInterval(name);
    }
    this.pollTimer = this.cleanupTimer = null;
    // One deadline for both: a claim stuck on a dead connection must not hang shutdown either.
    const deadline = Date.now() + this.config.shutdownTimeoutMs;
    const settled =
      (await settleWithin(Promise.all(this.polls), deadline)) &&
      (await settleWithin(
        Promise.allSettled([...this.inFlight.values()].map((f) => f.promise)),
        deadline,
      ));
    if (!settled) {
      this.logger.warn(
        OutboxMessages.shutdownTimeout(this.inFlight.size, this.config.shutdownTimeoutMs),
      );
      for (const f of this.inFlight.values()) f.abort.abort(new OutboxShutdownError());
    }
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
      running: this.running,
      paused: this.paused,
      inFlight: this.inFlight.size,
      ...this.counters,
    };
  }

  /**
   * Claims and runs deliveries until none is due (retries scheduled later are left for later).
   * Works whether or not the dispatcher is started; meant for your own tests.
   */
  async drain(options: { maxRounds?: number } = {}): Promise<void> {
    const maxRounds = options.maxRounds ?? 1_000_000;
    for (let round = 0; round < maxRounds; round++) {
      const free = this.config.concurrency - this.inFlight.size - this.reserved;
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
      const busy = [...this.inFlight.values()].map((f) => f.promise);
      if (busy.length === 0 && this.polls.size === 0) return;
      // Something still runs (ours or the poll loop's): wait for one to end, then look again.
      await Promise.race([...busy, ...this.polls]);
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

  /**
   * Starts a claim for the free handler slots. Up to two claims may be in flight, so slots that
   * free up while one claim waits on the store are refilled without waiting for it; slots are
   * reserved while a claim runs, so the dispatcher never holds more than `concurrency`.
   */
  private poll(): void {
    if (!this.running || this.stopping || this.paused) return;
    if (Date.now() < this.backoffUntil || this.polls.size >= MAX_CLAIMS_IN_FLIGHT) return;
    const free = this.config.concurrency - this.inFlight.size - this.reserved;
    const limit = Math.min(this.config.batchSize, free);
    // A second claim only for a worthwhile share of the slots, not one at a time.
    if (limit <= 0 || (this.polls.size > 0 && limit < Math.ceil(this.config.concurrency / 4)))
      return;
    this.reserved += limit;
    const poll: Promise<void> = this.claimOnce(limit)
      .then((claimed) => {
        // A full batch means more is waiting: claim again at once, not on the next tick.
        if (claimed >= limit) setImmediate(() => this.poll());
      })
      .finally(() => {
        this.reserved -= limit;
        this.polls.delete(poll);
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
    if (this.stopping) {
      await Promise.all(claimed.map((c) => this.release(c.lease)));
      return 0;
    }
    for (const delivery of claimed) this.launch(delivery);
    return claimed.length;
  }

  private launch(delivery: ClaimedDelivery): void {
    // A re-claim of the same delivery (after its lease expired) is a separate run; a store may
    // share one token across a claim's deliveries, so the key takes both.
    const runKey = `${delivery.id}:${delivery.lease.token}`;
    const abort = new AbortController();
    const promise = this.execute(delivery, abort)
      .catch((error) => this.logger.error(`Unexpected dispatcher error: ${String(error)}`))
      .finally(() => {
        this.inFlight.delete(runKey);
        // Work was left behind when the last claim came back full: fetch it now, not next tick.
        if (this.morePending) setImmediate(() => this.poll());
      });
    this.inFlight.set(runKey, { promise, abort });
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
    this.backoffUntil = Date.now() + delay;
    this.logger.warn(OutboxMessages.storeError(operation, error, delay));
  }

  private async release(lease: Lease): Promise<void> {
    try {
      await this.store.release(lease);
    } catch (error) {
      this.logger.warn(OutboxMessages.releaseFailed(lease.deliveryId, error));
    }
  }

  private async execute(delivery: ClaimedDelivery, abort: AbortController): Promise<void> {
    const handler = this.registry.get(delivery.handler);
    if (!handler) return this.release(delivery.lease);
    const maxAttempts = handler.maxAttempts ?? this.config.maxAttempts;
    if (delivery.attempt > maxAttempts) {
      // Earlier attempts died with their worker (crash or lost lease) without reporting.
      const error = new OutboxError(
        `No outcome reported by ${delivery.attempt - 1} attempt(s); the worker running them stopped`,
      );
      return this.finish(delivery, delivery.lease, handler, error, true);
    }

    let lease = delivery.lease;
    let settled = false;
    let renewing = false;
    // Timeout, lease loss and shutdown all abort the signal; the wait for the handler ends with it.
    const interrupted = new Promise<never>((_, reject) =>
      abort.signal.addEventListener('abort', () => reject(abort.signal.reason), { once: true }),
    );
    interrupted.catch(() => undefined);
    const renewTimer = setInterval(
      () => {
        if (renewing || settled) return;
        renewing = true;
        this.store
          .renew(lease, this.config.leaseMs)
          .then((renewed) => {
            if (!settled) lease = renewed;
          })
          .catch((error) => {
            if (error instanceof LeaseLostError) abort.abort(error);
            else this.logger.warn(OutboxMessages.renewFailed(lease.deliveryId, error));
          })
          .finally(() => (renewing = false));
      },
      Math.max(1, Math.floor(this.config.leaseMs / 3)),
    );
    // The handler's own work keeps the process alive, not our bookkeeping.
    renewTimer.unref();
    const timeoutMs = handler.timeoutMs ?? this.config.handlerTimeoutMs;
    const timeoutTimer = setTimeout(
      () => abort.abort(new HandlerTimeoutError(handler.name, timeoutMs)),
      timeoutMs,
    );
    timeoutTimer.unref();

    const context: OutboxHandlerContext = {
      attempt: delivery.attempt,
      signal: abort.signal,
      workerId: this.workerId,
      deliveryId: delivery.id,
      handler: handler.name,
    };
    let failure: unknown = undefined;
    let failed = false;
    try {
      await Promise.race([handler.invoke(delivery.event, context), interrupted]);
    } catch (error) {
      failed = true;
      failure = error;
    } finally {
      settled = true;
      clearInterval(renewTimer);
      clearTimeout(timeoutTimer);
    }
    if (failed && abort.signal.aborted && failure === abort.signal.reason) {
      if (failure instanceof LeaseLostError) {
        this.counters.leaseLost++;
        this.logger.warn(OutboxMessages.leaseLost(handler.name, delivery.id));
        return;
      }
      // Shut down under a running handler: report nothing, the lease expires, another worker redelivers.
      if (failure instanceof OutboxShutdownError) return;
    }
    return this.finish(delivery, lease, handler, failure, failed);
  }

  /** Reports the outcome to the store; a lost lease or store error discards it (redelivered later). */
  private async finish(
    delivery: ClaimedDelivery,
    lease: Lease,
    handler: RegisteredHandler,
    failure: unknown,
    failed: boolean,
  ): Promise<void> {
    try {
      if (!failed) {
        await this.ack(lease);
        this.counters.succeeded++;
        return;
      }
      this.counters.failed++;
      const error = this.describeError(failure, delivery.attempt);
      const maxAttempts = handler.maxAttempts ?? this.config.maxAttempts;
      const rejected =
        failure instanceof NonRetryableError ||
        this.retryRefused(handler, failure, delivery.attempt);
      if (rejected || delivery.attempt >= maxAttempts) {
        await this.store.deadLetter(lease, rejected ? 'rejected' : 'exhausted', error);
        this.counters.deadLettered++;
        this.logger.error(
          OutboxMessages.handlerFailed(
            handler.name,
            delivery.event.id,
            delivery.attempt,
            failure,
            `dead-lettered (${rejected ? 'rejected' : 'exhausted'})`,
          ),
        );
        return;
      }
      const delay = backoffDelay(delivery.attempt, { ...this.config.backoff, ...handler.backoff });
      await this.store.retry(lease, delay, error);
      this.counters.retried++;
      this.logger.warn(
        OutboxMessages.handlerFailed(
          handler.name,
          delivery.event.id,
          delivery.attempt,
          failure,
          `retrying in ${delay} ms`,
        ),
      );
    } catch (error) {
      if (error instanceof LeaseLostError) {
        this.counters.leaseLost++;
        this.logger.warn(OutboxMessages.leaseLost(handler.name, delivery.id));
      } else {
        this.storeFailed(failed ? 'retry' : 'ack', error);
      }
    }
  }

  /**
   * Acks through `store.ackMany` when the store has it, coalescing the acks of handlers that
   * finish in the same turn of the event loop into one round trip (one commit instead of many).
   */
  private ack(lease: Lease): Promise<void> {
    if (!this.store.ackMany) return this.store.ack(lease);
    return new Promise<void>((resolve, reject) => {
      this.pendingAcks.push({ lease, resolve, reject });
      if (this.pendingAcks.length === 1) setImmediate(() => void this.flushAcks());
    });
  }

  private async flushAcks(): Promise<void> {
    // Results come back by delivery id: two leases on one delivery (a stale one and a fresh one
    // after a re-claim) go in separate batches, so each gets its own fenced answer.
    const ids = new Set<string>();
    const batch: typeof this.pendingAcks = [];
    const later: typeof this.pendingAcks = [];
    for (const a of this.pendingAcks.splice(0)) {
      if (ids.has(a.lease.deliveryId)) later.push(a);
      else {
        ids.add(a.lease.deliveryId);
        batch.push(a);
      }
    }
    if (later.length > 0) {
      this.pendingAcks.push(...later);
      setImmediate(() => void this.flushAcks());
    }
    if (batch.length === 0) return;
    try {
      const acked = new Set(await this.store.ackMany!(batch.map((a) => a.lease)));
      for (const a of batch) {
        if (acked.has(a.lease.deliveryId)) a.resolve();
        else a.reject(new LeaseLostError(a.lease.deliveryId, a.lease.owner));
      }
    } catch (error) {
      for (const a of batch) a.reject(error);
    }
  }

  private retryRefused(handler: RegisteredHandler, failure: unknown, attempt: number): boolean {
    if (!handler.retryIf) return false;
    try {
      return handler.retryIf(failure, attempt) === false;
    } catch {
      return false;
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

  private async cleanup(): Promise<void> {
    if (this.cleaning) return;
    this.cleaning = true;
    try {
      const { deliveredMs, deadLetterMs, batchSize } = this.options.retention;
      const result = await this.store.cleanup({
        deliveredRetentionMs: deliveredMs,
        deadLetterRetentionMs: deadLetterMs,
        batchSize,
      });
      if (result.events + result.deadLetters > 0) {
        this.logger.debug(OutboxMessages.cleanupDone(result.events, result.deadLetters));
      }
    } catch (error) {
      this.logger.warn(OutboxMessages.cleanupFailed(error));
    } finally {
      this.cleaning = false;
    }
  }
}

/** Resolves true when `promise` settles before `deadline` (epoch ms), false otherwise. */
async function settleWithin(promise: Promise<unknown>, deadline: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), Math.max(0, deadline - Date.now()));
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

function safeString(value: unknown): string {
  try {
    return typeof value === 'string' ? value : (JSON.stringify(value) ?? String(value));
  } catch {
    return String(value);
  }
}
