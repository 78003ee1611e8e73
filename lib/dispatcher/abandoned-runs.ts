import { AbandonReason } from '../errors/abandoned-run.error';
import { HandlerTimeoutError } from '../errors/handler-timeout.error';
import { LeaseLostError } from '../errors/lease-lost.error';
import { OutboxEvents } from '../observability/outbox-events';
import { DispatcherCounters } from './outbox-dispatcher.stats';
import { RunOutcomes } from './run-outcomes';
import { Slot } from './run-slot';

/** A run given up on (timeout, lease lost, shutdown) whose handler has not settled yet. */
export interface AbandonedRun {
  readonly slot: Slot;
  readonly reason: AbandonReason;
  /** Reported on the event stream (still running one turn after its signal was aborted). */
  reported: boolean;
}

/**
 * Runs the dispatcher stopped waiting for (timeout, lease lost, shutdown) while their handler
 * still executes — JavaScript cannot stop it. Kept by delivery id until the handler settles, so
 * a new claim of the delivery is not started beside it (see `HandlerRuns.admit`); one still
 * running a turn after its signal was aborted is counted and reported.
 */
export class AbandonedRuns {
  private readonly runs = new Map<string, AbandonedRun>();
  /** Runs reported abandoned whose handler has not settled yet. */
  private reportedRunning = 0;

  constructor(
    private readonly outcomes: RunOutcomes,
    private readonly events: OutboxEvents,
    private readonly counters: DispatcherCounters,
  ) {}

  /** Reported runs still executing (`stats().abandonedRunning`). */
  get running(): number {
    return this.reportedRunning;
  }

  /** The abandoned run of this delivery whose handler still executes, if any. */
  get(deliveryId: string): AbandonedRun | undefined {
    return this.runs.size === 0 ? undefined : this.runs.get(deliveryId);
  }

  /**
   * Remembers a run the dispatcher stopped waiting for until its handler really settles; one
   * still running on the next turn (its handler ignores its aborted signal) is reported.
   */
  abandon(slot: Slot): void {
    const reason: AbandonReason =
      slot.interruptedBy instanceof HandlerTimeoutError
        ? 'timeout'
        : slot.interruptedBy instanceof LeaseLostError
          ? 'lease-lost'
          : 'shutdown';
    const run: AbandonedRun = { slot, reason, reported: false };
    this.runs.set(slot.delivery.id, run);
    slot.invocation!.then(
      () => this.settled(run, false),
      () => this.settled(run, true),
    );
    // A handler honouring its signal has settled by then: only one that ignores it is reported.
    setImmediate(() => {
      if (this.runs.get(slot.delivery.id) !== run) return;
      run.reported = true;
      this.counters.abandoned++;
      this.reportedRunning++;
      if (this.events.wants('abandoned')) {
        this.events.emit({
          ...this.outcomes.observe('abandoned', slot.delivery),
          reason,
          timeoutMs: slot.timeoutMs,
          startedAt: slot.startedAt,
        });
      }
    });
  }

  /** An abandoned run's handler settled at last: the delivery may start here again. */
  private settled(run: AbandonedRun, failed: boolean): void {
    const { delivery } = run.slot;
    if (this.runs.get(delivery.id) === run) this.runs.delete(delivery.id);
    if (!run.reported) return;
    this.reportedRunning--;
    if (this.events.wants('abandoned-settled')) {
      this.events.emit({
        ...this.outcomes.observe('abandoned-settled', delivery),
        durationMs: performance.now() - run.slot.started,
        failed,
      });
    }
  }
}
