import { LeaseLostError } from '../errors/lease-lost.error';
import { OutboxShutdownError } from '../errors/outbox-shutdown.error';
import { DEFAULT_ERROR_STACKS } from '../outbox-options';
import { ResolvedOutboxOptions } from '../interfaces/outbox-module-options.interface';
import { ClaimedDelivery, DeliveryErrorInput, Lease } from '../interfaces/outbox-store.interface';
import { OutboxEvents } from '../observability/outbox-events';
import type {
  DeliveryObservation,
  ObservedError,
  OutboxObservationKind,
} from '../observability/outbox-events.interface';
import { RegisteredHandler } from '../outbox-handler.registry';
import { decideOutcome, RunResult } from './delivery-outcome';
import { DispatcherCounters } from './outbox-dispatcher.stats';
import { OutcomeReporter, PendingAck } from './outcome-reporter';
import { isKeyed, RunTiming, Slot } from './run-slot';
import { isInstance, thrownNameAndMessage } from './thrown-value';

/** What the event stream says of a delivery: its ids and names (a `ClaimedDelivery` is one). */
export interface DeliveryRef {
  readonly id: string;
  readonly handler: string;
  readonly attempt: number;
  readonly event: { readonly id: string; readonly type: string; readonly availableAt: Date };
}

/**
 * A successful run's ack waiting for its batch: the lease the store needs, and what the event
 * stream says once it is written. It holds nothing else of the run: the delivery's event, payload
 * and headers, its `Slot` and the handler's context are let go when the handler returns, not when
 * the store answers the batch (a round trip, with a few hundred other acks).
 */
class SucceededRun implements PendingAck, RunTiming, DeliveryRef {
  readonly lease: Lease;
  readonly keyed: boolean;
  readonly id: string;
  readonly handler: string;
  readonly attempt: number;
  readonly event: DeliveryRef['event'];
  readonly startedAt: number;
  readonly durationMs: number;

  constructor(
    private readonly outcomes: RunOutcomes,
    slot: Slot,
  ) {
    const { delivery } = slot;
    const { event } = delivery;
    this.lease = slot.lease;
    this.keyed = slot.keyed;
    this.id = delivery.id;
    this.handler = delivery.handler;
    this.attempt = delivery.attempt;
    this.event = { id: event.id, type: event.type, availableAt: event.availableAt };
    this.startedAt = slot.startedAt;
    this.durationMs = slot.durationMs;
  }

  resolve(): void {
    this.outcomes.delivered(this, this);
  }

  reject(error: unknown): void {
    this.outcomes.reportFailed(this, 'ack', error);
  }
}

/**
 * What follows a run: its outcome decided (`decideOutcome`, pure), handed to the reporter to be
 * written in the background, and, once written, counted and told to the event stream (the logs
 * and metrics listen there). Store errors are counted here too, and back the claim loop off.
 */
export class RunOutcomes {
  /** The last store error met while writing outcomes (a batch shares one). */
  private lastOutcomeError: unknown = null;

  constructor(
    private readonly reporter: OutcomeReporter,
    private readonly options: ResolvedOutboxOptions,
    private readonly events: OutboxEvents,
    private readonly counters: DispatcherCounters,
    /** Backs the claim loop off after a store error; returns how long. */
    private readonly backOff: () => number,
  ) {}

  private get workerId(): string {
    return this.options.dispatcher.workerId;
  }

  /**
   * Decides what happens to the delivery and has the reporter write it in the background; each
   * outcome, once written, is reported on the event stream.
   */
  report(
    delivery: ClaimedDelivery,
    lease: Lease,
    handler: RegisteredHandler,
    result: RunResult,
    timing: RunTiming | null,
  ): void {
    if (!result.failed && timing instanceof Slot) {
      // Succeeded (the common case): no policy to consult.
      this.reporter.enqueueAck(new SucceededRun(this, timing));
      return;
    }
    const config = this.options.dispatcher;
    const outcome = decideOutcome(result, {
      attempt: delivery.attempt,
      maxAttempts: handler.maxAttempts ?? config.maxAttempts,
      backoff: { ...config.backoff, ...handler.backoff },
      retryIf: handler.retryIf,
      isShutdown: (reason) => reason instanceof OutboxShutdownError,
    });
    if (outcome.kind === 'lost') {
      this.leaseLost(delivery, 'renewal');
      return;
    }
    if (outcome.kind === 'abandoned') return;
    if (outcome.kind === 'ack') {
      this.reporter.ack(lease, isKeyed(delivery)).then(
        () => this.delivered(delivery, timing),
        (error) => this.reportFailed(delivery, 'ack', error),
      );
      return;
    }
    this.counters.failed++;
    const error = this.describeError(result.failure, delivery.attempt);
    if (outcome.kind === 'dead') {
      this.reporter.deadLetter(lease, outcome.reason, error, isKeyed(delivery)).then(
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
        (e) => this.reportFailed(delivery, 'retry', e),
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
      (e) => this.reportFailed(delivery, 'retry', e),
    );
  }

  delivered(delivery: DeliveryRef, timing: RunTiming | null): void {
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

  /** A lost lease or store error discards the outcome (the delivery is redelivered later). */
  reportFailed(delivery: DeliveryRef, operation: string, error: unknown): void {
    if (error instanceof LeaseLostError) {
      this.leaseLost(delivery, 'outcome');
    } else if (error !== this.lastOutcomeError) {
      // One failed batch rejects each of its acks with the same error: one store error, one line.
      this.lastOutcomeError = error;
      this.storeFailed(operation, error);
    }
  }

  leaseLost(delivery: DeliveryRef, during: 'renewal' | 'outcome'): void {
    this.counters.leaseLost++;
    if (this.events.wants('lease-lost')) {
      this.events.emit({ ...this.observe('lease-lost', delivery), during });
    }
  }

  storeFailed(operation: string, error: unknown): void {
    this.counters.storeErrors++;
    const { name, message } = thrownNameAndMessage(error);
    this.counters.lastStoreError = isInstance(error, Error) ? `${name}: ${message}` : message;
    const delay = this.backOff();
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

  /** What the event stream says about a delivery (ids and names, never the payload). */
  observe<K extends OutboxObservationKind>(
    kind: K,
    delivery: DeliveryRef,
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

  private describeError(failure: unknown, attempt: number): DeliveryErrorInput {
    const max = this.options.limits.errorMaxLength;
    // NUL cannot be stored in PostgreSQL text; an error that could not be recorded is worse.
    const clean = (text: string) => text.replaceAll('\u0000', '');
    const described = thrownNameAndMessage(failure);
    const name = clean(described.name) || 'Error';
    const message = clean(described.message);
    const stack = stackHead(failure, this.options.errorStacks);
    return {
      name: name.slice(0, 255),
      message: message.slice(0, max),
      ...(stack ? { stack: clean(stack) } : {}),
      attempt,
      workerId: this.workerId,
    };
  }
}

function observedError(error: unknown): ObservedError {
  return thrownNameAndMessage(error);
}

/**
 * The first `lines` lines of a failure's stack, at most `maxLength` characters; `undefined` when
 * stacks are off (`errorStacks: false`) or the failure has no string stack.
 */
export function stackHead(
  failure: unknown,
  options: ResolvedOutboxOptions['errorStacks'],
): string | undefined {
  const limits = options === undefined ? DEFAULT_ERROR_STACKS : options;
  if (limits === null || !isInstance(failure, Error)) return undefined;
  let stack: unknown;
  try {
    stack = failure.stack;
  } catch {
    return undefined;
  }
  if (typeof stack !== 'string' || stack === '') return undefined;
  return stack.split('\n', limits.lines).join('\n').slice(0, limits.maxLength);
}
