import {
  ClaimedDelivery,
  ClaimRequest,
  CleanupOptions,
  CleanupResult,
  DeadLetter,
  DeadLetterFilter,
  DeadLetterPage,
  DeadLetterPageQuery,
  DeadLetterReason,
  DeadLetterSelector,
  DeadLetterSummaryRow,
  DeliveryErrorInput,
  Lease,
  OutboxStore,
  OutboxStoreStats,
  AppendableEvent,
  StoreAppendOptions,
} from '../interfaces/outbox-store.interface';
import { OutboxEvent } from '../interfaces/outbox-event.interface';
import { LeaseLostError } from '../errors/lease-lost.error';

/**
 * A store built once the application's providers exist. Stores that live on an app provider
 * (a TypeORM DataSource from `@nestjs/typeorm`, an ioredis client) cannot be looked up while Nest
 * is still instantiating providers: the lookup would return an unresolved placeholder. The module
 * opens this store in `onModuleInit`, when every provider is ready; the first call opens it too.
 */
export class DeferredOutboxStore implements OutboxStore {
  private opening: Promise<OutboxStore> | null = null;
  /** The store once built: the hot calls skip a promise tick through `open()`. */
  private opened: OutboxStore | null = null;

  constructor(private readonly create: () => Promise<OutboxStore>) {}

  /** Builds (once) and returns the real store; a failure is thrown and retried on the next call. */
  open(): Promise<OutboxStore> {
    this.opening ??= this.attempt = this.create().then(
      (store) => (this.opened = store),
      (error: unknown) => {
        this.opening = null;
        throw error;
      },
    );
    return this.opening;
  }

  /** The latest attempt to open (pending, done or failed), without starting one; `null` before any. */
  lastAttempt(): Promise<OutboxStore> | null {
    return this.attempt;
  }

  private attempt: Promise<OutboxStore> | null = null;

  async append(events: AppendableEvent[], options?: StoreAppendOptions): Promise<OutboxEvent[]> {
    return (this.opened ?? (await this.open())).append(events, options);
  }
  async claim(request: ClaimRequest): Promise<ClaimedDelivery[]> {
    return (this.opened ?? (await this.open())).claim(request);
  }
  async renew(lease: Lease, leaseMs: number): Promise<Lease> {
    return (await this.open()).renew(lease, leaseMs);
  }
  async ack(lease: Lease): Promise<void> {
    return (await this.open()).ack(lease);
  }
  async ackMany(leases: Lease[]): Promise<string[]> {
    const store = this.opened ?? (await this.open());
    if (store.ackMany) return store.ackMany(leases);
    // A store without a batched ack: the acks run side by side, as they would without batching.
    const outcomes = await Promise.allSettled(leases.map((lease) => store.ack(lease)));
    const failure = outcomes.find(
      (o): o is PromiseRejectedResult =>
        o.status === 'rejected' && !(o.reason instanceof LeaseLostError),
    );
    if (failure) throw failure.reason;
    return leases.filter((_, i) => outcomes[i].status === 'fulfilled').map((l) => l.deliveryId);
  }

  async retry(lease: Lease, delayMs: number, error: DeliveryErrorInput): Promise<void> {
    return (await this.open()).retry(lease, delayMs, error);
  }
  async deadLetter(
    lease: Lease,
    reason: DeadLetterReason,
    error: DeliveryErrorInput,
  ): Promise<void> {
    return (await this.open()).deadLetter(lease, reason, error);
  }
  async release(lease: Lease): Promise<void> {
    return (await this.open()).release(lease);
  }
  async listDeadLetters(query: DeadLetterPageQuery): Promise<DeadLetterPage> {
    return (await this.open()).listDeadLetters(query);
  }
  async getDeadLetter(id: string): Promise<DeadLetter | null> {
    return (await this.open()).getDeadLetter(id);
  }
  async summarizeDeadLetters(filter: DeadLetterFilter): Promise<DeadLetterSummaryRow[]> {
    return (await this.open()).summarizeDeadLetters(filter);
  }
  async replay(selector: DeadLetterSelector, availableAt?: Date): Promise<number> {
    return (await this.open()).replay(selector, availableAt);
  }
  async purge(selector: DeadLetterSelector): Promise<number> {
    return (await this.open()).purge(selector);
  }
  async stats(): Promise<OutboxStoreStats> {
    return (await this.open()).stats();
  }
  async cleanup(options: CleanupOptions): Promise<CleanupResult> {
    return (await this.open()).cleanup(options);
  }
  async now(): Promise<Date> {
    return (await this.open()).now();
  }
  onAppended(listener: () => void): () => void {
    let unsubscribe: (() => void) | undefined;
    let active = true;
    void this.open()
      .then((store) => {
        if (active) unsubscribe = store.onAppended?.(listener);
      })
      .catch(() => undefined);
    return () => {
      active = false;
      unsubscribe?.();
    };
  }

  async publishWakeups(): Promise<void> {
    await (await this.open()).publishWakeups?.();
  }

  onWakeup(listener: () => void): () => Promise<void> {
    let unsubscribe: (() => Promise<void>) | undefined;
    let active = true;
    const opened = this.open()
      .then((store) => {
        if (active) unsubscribe = store.onWakeup?.(listener);
      })
      .catch(() => undefined);
    return async () => {
      active = false;
      await opened;
      await unsubscribe?.();
    };
  }

  async close(): Promise<void> {
    if (!this.opening) return;
    const store = await this.opening.catch(() => null);
    await store?.close?.();
  }
}
