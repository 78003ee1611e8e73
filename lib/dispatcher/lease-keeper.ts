import { LeaseLostError } from '../errors/lease-lost.error';
import { addPlaced, removePlaced } from './placed-list';
import { Lease, OutboxStore } from '../interfaces/outbox-store.interface';

/** A lease the keeper renews, and how to stop its run when the lease cannot be kept. */
export interface KeptLease {
  lease: Lease;
  /** Monotonic local time (`performance.now()`) by which the lease is surely expired unless renewed. */
  expiresAt: number;
  renewing: boolean;
  /** Its place in the keeper's list while kept, -1 otherwise (set by the keeper). */
  keptAt: number;
  /** Stops the run: the lease is lost, or could not be renewed in time. */
  lose(error: LeaseLostError): void;
}

/**
 * Renews the leases of every running delivery from one timer (about every lease/3), instead of
 * a timer per delivery. A lease that could not be renewed before it runs out — the store said
 * it is lost, or renewals failed (e.g. the database is failing over) — stops its run before the
 * store would let another worker claim the delivery: the run is treated as lost and its outcome
 * discarded, so one delivery never runs twice at once.
 *
 * Expiry is tracked on the monotonic local clock from the moment each renewal was *sent* (never
 * later than the store's own expiry), so neither skew between this host and the store nor a step
 * of the wall clock can extend or cut it.
 */
export class LeaseKeeper {
  /**
   * The kept leases, in no order; each knows its place (`keptAt`), so release is a swap with the
   * last. Not a `Set`: a set that many deliveries pass through rebuilds its table every few
   * hundred of them, and V8 links each discarded table, its entries still in it, to the next one;
   * once one of them reaches the old generation, that chain keeps every delivery it ever held
   * alive through each scavenge until the next full collection.
   */
  private readonly kept: KeptLease[] = [];
  private timer: NodeJS.Timeout | null = null;
  private readonly every: number;

  constructor(
    private readonly store: OutboxStore,
    private readonly leaseMs: number,
    private readonly onRenewError: (lease: Lease, error: unknown) => void,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.every = Math.max(1, Math.floor(leaseMs / 3));
  }

  /** Starts keeping a lease obtained by a claim sent at `sentAt`. */
  keep(lease: Lease, sentAt: number, lose: (error: LeaseLostError) => void): KeptLease {
    return this.add({ lease, expiresAt: 0, renewing: false, keptAt: -1, lose }, sentAt);
  }

  /** Starts keeping `kept` (its lease obtained by a claim sent at `sentAt`). */
  add<K extends KeptLease>(kept: K, sentAt: number): K {
    kept.expiresAt = sentAt + this.leaseMs;
    addPlaced(this.kept, kept, 'keptAt');
    if (!this.timer) {
      this.timer = setInterval(() => this.tick(), this.every);
      // The handlers' own work keeps the process alive, not this bookkeeping.
      this.timer.unref();
    }
    return kept;
  }

  release(kept: KeptLease): void {
    if (!removePlaced(this.kept, kept, 'keptAt')) return;
    if (this.kept.length === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }

  stop(): void {
    for (const kept of this.kept) kept.keptAt = -1;
    this.kept.length = 0;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private tick(): void {
    const now = this.now();
    // A copy: a lease lost here leaves the list; one released meanwhile is skipped.
    for (const kept of this.kept.slice()) {
      if (kept.keptAt < 0) continue;
      // The next tick would come too late: give up while the lease still holds.
      if (now + this.every >= kept.expiresAt) {
        this.release(kept);
        kept.lose(new LeaseLostError(kept.lease.deliveryId, kept.lease.owner));
        continue;
      }
      if (!kept.renewing) this.renew(kept, now);
    }
  }

  private renew(kept: KeptLease, sentAt: number): void {
    kept.renewing = true;
    this.store
      .renew(kept.lease, this.leaseMs)
      .then((renewed) => {
        if (kept.keptAt < 0) return;
        kept.lease = renewed;
        kept.expiresAt = sentAt + this.leaseMs;
      })
      .catch((error) => {
        if (kept.keptAt < 0) return;
        if (error instanceof LeaseLostError) {
          this.release(kept);
          kept.lose(error);
        } else {
          this.onRenewError(kept.lease, error);
        }
      })
      .finally(() => (kept.renewing = false));
  }
}
