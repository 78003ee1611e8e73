import { LeaseLostError } from '../errors/lease-lost.error';
import {
  DeadLetterReason,
  DeliveryErrorInput,
  Lease,
  OutboxStore,
} from '../interfaces/outbox-store.interface';

/** An ack waiting for its batch; told how it went through `resolve` or `reject`. */
export interface PendingAck {
  lease: Lease;
  /** The delivery has a key: once acknowledged, the key's next event may be claimed. */
  readonly keyed: boolean;
  resolve(): void;
  reject(error: unknown): void;
}

/**
 * Writes outcomes to the store in the background, so a handler's slot is free as soon as it
 * returns. Acks of runs finishing close together go to the store as one `ackMany` (one round
 * trip, one commit) when the store has it; each stays fenced, and one whose lease was lost
 * meanwhile is reported as lost, never acknowledged silently. `settled()` waits for every
 * outcome written so far (drain and shutdown use it).
 */
export class OutcomeReporter {
  private pendingAcks: PendingAck[] = [];
  /** Writes other than batched acks (each its own store call). */
  private readonly writes = new Set<Promise<unknown>>();
  /** Batched acks handed over and not yet answered. */
  private acksUnwritten = 0;
  /** Resolved when `acksUnwritten` drops to zero; made only while `settled()` waits. */
  private acksIdle: { promise: Promise<void>; resolve: () => void } | null = null;
  private flushing = false;

  constructor(
    private readonly store: OutboxStore,
    /**
     * Called whenever an outcome has been written (capacity may have freed); `freedKey` when it
     * ended a keyed delivery (acknowledged or dead-lettered), whose key's next event may now be
     * claimed.
     */
    private readonly onWritten: (freedKey: boolean) => void = () => undefined,
  ) {}

  /** Outcomes handed over and not yet written. */
  get backlog(): number {
    return this.writes.size + this.acksUnwritten;
  }

  /** `keyed`: the delivery has a key (see `PendingAck.keyed`). */
  ack(lease: Lease, keyed: boolean): Promise<void> {
    if (!this.store.ackMany) return this.track(this.store.ack(lease), keyed);
    return new Promise<void>((resolve, reject) =>
      this.enqueueAck({ lease, keyed, resolve, reject }),
    );
  }

  /**
   * `ack` without a promise: `pending` is told the result. With a store without `ackMany`, each
   * ack is its own call.
   */
  enqueueAck(pending: PendingAck): void {
    if (!this.store.ackMany) {
      this.track(this.store.ack(pending.lease), pending.keyed).then(
        () => pending.resolve(),
        (error: unknown) => pending.reject(error),
      );
      return;
    }
    this.pendingAcks.push(pending);
    this.acksUnwritten++;
    if (!this.flushing) {
      this.flushing = true;
      setImmediate(() => void this.flush());
    }
  }

  /** A retried delivery stays its key's oldest open one: the key is not freed. */
  retry(lease: Lease, delayMs: number, error: DeliveryErrorInput): Promise<void> {
    return this.track(this.store.retry(lease, delayMs, error), false);
  }

  deadLetter(
    lease: Lease,
    reason: DeadLetterReason,
    error: DeliveryErrorInput,
    keyed: boolean,
  ): Promise<void> {
    return this.track(this.store.deadLetter(lease, reason, error), keyed);
  }

  /** Resolves once every outcome handed over before (and during) the wait is written. */
  async settled(): Promise<void> {
    while (this.backlog > 0) {
      const waits: Promise<unknown>[] = [...this.writes];
      if (this.acksUnwritten > 0) {
        if (!this.acksIdle) {
          let resolve!: () => void;
          const promise = new Promise<void>((r) => (resolve = r));
          this.acksIdle = { promise, resolve };
        }
        waits.push(this.acksIdle.promise);
      }
      await Promise.allSettled(waits);
    }
  }

  /** `freesKey`: written, it ends a keyed delivery (a failed write frees nothing). */
  private track<T>(promise: Promise<T>, freesKey: boolean): Promise<T> {
    this.writes.add(promise);
    const forget = (written: boolean) => {
      this.writes.delete(promise);
      this.onWritten(written && freesKey);
    };
    promise.then(
      () => forget(true),
      () => forget(false),
    );
    return promise;
  }

  private async flush(): Promise<void> {
    // Results come back by delivery id: two leases on one delivery (a stale one and a fresh one
    // after a re-claim) go in separate batches, so each gets its own fenced answer.
    let batch = this.pendingAcks;
    this.pendingAcks = [];
    const ids = new Set<string>();
    let later: PendingAck[] | null = null;
    for (const a of batch) {
      if (!ids.has(a.lease.deliveryId)) ids.add(a.lease.deliveryId);
      else (later ??= []).push(a);
    }
    if (later) {
      const deferred = new Set(later);
      batch = batch.filter((a) => !deferred.has(a));
      this.pendingAcks.push(...later);
    }
    try {
      if (batch.length === 0) return;
      const leases = new Array<Lease>(batch.length);
      for (let i = 0; i < batch.length; i++) leases[i] = batch[i].lease;
      const ackedIds = await this.store.ackMany!(leases);
      // Ids in a batch are distinct, so as many acknowledged as sent means all of them.
      const acked = ackedIds.length === batch.length ? null : new Set(ackedIds);
      for (const a of batch) {
        this.acksUnwritten--;
        this.answer(a, acked === null || acked.has(a.lease.deliveryId) ? null : lost(a.lease));
      }
    } catch (error) {
      for (const a of batch) {
        this.acksUnwritten--;
        this.answer(a, error);
      }
    } finally {
      if (this.acksUnwritten === 0 && this.acksIdle) {
        this.acksIdle.resolve();
        this.acksIdle = null;
      }
      // Acks that arrived while this batch was on its way go next, in one batch of their own.
      if (this.pendingAcks.length > 0) setImmediate(() => void this.flush());
      else this.flushing = false;
    }
  }

  /**
   * Tells one ack its result, then reports the write. The acks of one batch are answered in one
   * turn, so their freed keys cost the claim loop one claim (see `Owed.freed`).
   */
  private answer(a: PendingAck, error: unknown): void {
    if (error === null) a.resolve();
    else a.reject(error);
    this.onWritten(error === null && a.keyed);
  }
}

function lost(lease: Lease): LeaseLostError {
  return new LeaseLostError(lease.deliveryId, lease.owner);
}
