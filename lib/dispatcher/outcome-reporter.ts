import { LeaseLostError } from '../errors/lease-lost.error';
import {
  DeadLetterReason,
  DeliveryErrorInput,
  Lease,
  OutboxStore,
} from '../interfaces/outbox-store.interface';

interface PendingAck {
  lease: Lease;
  resolve: () => void;
  reject: (error: unknown) => void;
}

/**
 * Writes outcomes to the store in the background, so a handler's slot is free as soon as it
 * returns. Acks of runs finishing close together go to the store as one `ackMany` (one round
 * trip, one commit) when the store has it; each stays fenced, and one whose lease was lost
 * meanwhile is reported as lost, never acknowledged silently. `settled()` waits for every
 * outcome written so far (drain and shutdown use it).
 */
export class OutcomeReporter {
  private readonly pendingAcks: PendingAck[] = [];
  private readonly writes = new Set<Promise<unknown>>();
  private flushing = false;

  constructor(
    private readonly store: OutboxStore,
    /** Called whenever an outcome has been written (capacity may have freed). */
    private readonly onWritten: () => void = () => undefined,
  ) {}

  /** Outcomes handed over and not yet written. */
  get backlog(): number {
    return this.writes.size;
  }

  ack(lease: Lease): Promise<void> {
    if (!this.store.ackMany) return this.track(this.store.ack(lease));
    const done = new Promise<void>((resolve, reject) => {
      this.pendingAcks.push({ lease, resolve, reject });
    });
    if (!this.flushing) {
      this.flushing = true;
      setImmediate(() => void this.flush());
    }
    return this.track(done);
  }

  retry(lease: Lease, delayMs: number, error: DeliveryErrorInput): Promise<void> {
    return this.track(this.store.retry(lease, delayMs, error));
  }

  deadLetter(lease: Lease, reason: DeadLetterReason, error: DeliveryErrorInput): Promise<void> {
    return this.track(this.store.deadLetter(lease, reason, error));
  }

  /** Resolves once every outcome handed over before (and during) the wait is written. */
  async settled(): Promise<void> {
    while (this.writes.size > 0) await Promise.allSettled([...this.writes]);
  }

  private track<T>(promise: Promise<T>): Promise<T> {
    this.writes.add(promise);
    const forget = () => {
      this.writes.delete(promise);
      this.onWritten();
    };
    promise.then(forget, forget);
    return promise;
  }

  private async flush(): Promise<void> {
    // Results come back by delivery id: two leases on one delivery (a stale one and a fresh one
    // after a re-claim) go in separate batches, so each gets its own fenced answer.
    const ids = new Set<string>();
    const batch: PendingAck[] = [];
    const later: PendingAck[] = [];
    for (const a of this.pendingAcks.splice(0)) {
      if (ids.has(a.lease.deliveryId)) later.push(a);
      else {
        ids.add(a.lease.deliveryId);
        batch.push(a);
      }
    }
    this.pendingAcks.push(...later);
    try {
      if (batch.length === 0) return;
      const acked = new Set(await this.store.ackMany!(batch.map((a) => a.lease)));
      for (const a of batch) {
        if (acked.has(a.lease.deliveryId)) a.resolve();
        else a.reject(new LeaseLostError(a.lease.deliveryId, a.lease.owner));
      }
    } catch (error) {
      for (const a of batch) a.reject(error);
    } finally {
      // Acks that arrived while this batch was on its way go next, in one batch of their own.
      if (this.pendingAcks.length > 0) setImmediate(() => void this.flush());
      else this.flushing = false;
    }
  }
}
