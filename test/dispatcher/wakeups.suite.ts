import { OutboxStore } from 'nestjs-outbox';
import { createOutboxApp, TestApp } from '../support/outbox-app';
import { eventually, Producer, spawnProducer, WorkerHandlers } from './wake-test-helpers';

export interface WakeTarget {
  /** A store for the worker (its own connections), and what the producer child needs. */
  setup(): Promise<{
    store: OutboxStore;
    producerEnv: Record<string, string>;
    /** Kills the worker's wake-up subscription from the server side; returns how many. */
    killSubscription(): Promise<number>;
    teardown(): Promise<void>;
  }>;
  /** The store joins the caller's SQL transaction. */
  transactions: boolean;
  /**
   * Wake-ups the dispatcher counts for one (re)connect: PostgreSQL's listener claims at once and
   * again a listener TTL later. Default 1.
   */
  wakeupsPerConnect?: number;
}

/** docs/wakeups.md: an event committed in one process reaches a worker in another at once. */
export function wakeupSuite(target: WakeTarget): void {
  let ctx: Awaited<ReturnType<WakeTarget['setup']>>;
  let worker: TestApp;
  let handlers: WorkerHandlers;
  let producer: Producer;
  let claims: jest.SpyInstance;

  beforeAll(async () => {
    ctx = await target.setup();
    // The child starts while the worker does: both take seconds on a shared machine.
    const starting = spawnProducer({ ...ctx.producerEnv, WAKE_LOCAL_HANDLER: '1' });
    claims = jest.spyOn(ctx.store, 'claim');
    worker = await createOutboxApp([WorkerHandlers], {
      store: ctx.store,
      // Far longer than any assertion below: only a wake-up can explain a prompt delivery.
      dispatcher: { pollInterval: 10_000, leaseMs: 30_000 },
    });
    handlers = worker.get(WorkerHandlers);
    producer = await starting;
    // The subscription tells the dispatcher once it listens (and, on PostgreSQL, once more a
    // listener TTL later: waited for, so no test below counts it as a signal).
    const perConnect = target.wakeupsPerConnect ?? 1;
    expect(await eventually(() => worker.dispatcher.stats().wakeups >= perConnect, 10_000)).toBe(
      true,
    );
  }, 30_000);

  afterAll(async () => {
    await producer?.close();
    await worker?.app.close();
    await ctx?.teardown();
  });

  const within = async (ids: string[], sentAt: number, ms: number) => {
    const at = await Promise.race([
      Promise.all(ids.map((id) => handlers.handled(id))),
      new Promise<null>((r) => setTimeout(() => r(null), ms + 3_000).unref()),
    ]);
    expect(at).not.toBeNull();
    expect(Math.max(...at!) - sentAt).toBeLessThan(ms);
  };

  it('an event appended outside a transaction in another process is handled there in < 2 s (pollInterval 10 s)', async () => {
    const sentAt = Date.now();
    const { ids } = await producer.append({ type: 'wake.known', count: 1, mode: 'own' });
    await within(ids, sentAt, 2_000);
  });

  it('also when the producing process has no handler for the type (no probe quiet period)', async () => {
    // Several rounds: each must be prompt, not only the first after a probe.
    for (let i = 0; i < 3; i++) {
      const sentAt = Date.now();
      const { ids } = await producer.append({ type: 'wake.unknown', count: 1, mode: 'own' });
      await within(ids, sentAt, 2_000);
    }
  });

  if (target.transactions) {
    it('an append in the caller’s transaction wakes the worker when it commits', async () => {
      const sentAt = Date.now();
      const { ids } = await producer.append({ type: 'wake.unknown', count: 1, mode: 'tx' });
      await within(ids, sentAt, 2_000);
    });

    it('a rolled-back transaction wakes nobody and delivers nothing', async () => {
      const before = worker.dispatcher.stats();
      const claimsBefore = claims.mock.calls.length;
      const { ids } = await producer.append({ type: 'wake.known', count: 3, mode: 'rollback' });
      await new Promise((r) => setTimeout(r, 500));
      expect(worker.dispatcher.stats().wakeups).toBe(before.wakeups);
      expect(claims.mock.calls.length).toBe(claimsBefore);
      expect(ids.some((id) => handlers.handledAt.has(id))).toBe(false);
      expect((await ctx.store.stats()).pending).toBe(0);
    });
  }

  it('a killed subscription reconnects, and an event committed while it was down is delivered promptly', async () => {
    const wakeups = worker.dispatcher.stats().wakeups;
    expect(await ctx.killSubscription()).toBeGreaterThanOrEqual(1);
    const sentAt = Date.now();
    const { ids } = await producer.append({ type: 'wake.unknown', count: 1, mode: 'own' });
    await within(ids, sentAt, 2_000);
    // It listens again: the reconnect counted as a wake-up, and new signals arrive.
    expect(await eventually(() => worker.dispatcher.stats().wakeups > wakeups, 5_000)).toBe(true);
    const again = Date.now();
    const next = await producer.append({ type: 'wake.known', count: 1, mode: 'own' });
    await within(next.ids, again, 2_000);
  });

  it('a burst of 5,000 appends from 4 producers costs far fewer claims than events', async () => {
    const claimsBefore = claims.mock.calls.length;
    const before = worker.dispatcher.stats();
    const sentAt = Date.now();
    const { ids } = await producer.append({
      type: 'wake.known',
      count: 5_000,
      concurrency: 4,
      mode: 'own',
    });
    // Generous: the 5,000 appends themselves take most of it on a loaded 2-core machine.
    await within(ids, sentAt, 50_000);
    const used = claims.mock.calls.length - claimsBefore;
    const stats = worker.dispatcher.stats();
    const wakeups = stats.wakeups - before.wakeups;
    const wakeupClaims = stats.wakeupClaims - before.wakeupClaims;
    process.stdout.write(
      `burst: ${ids.length} events in ${Date.now() - sentAt} ms, ${used} claims, ${wakeups} wake-ups received, ${wakeupClaims} claims for wake-ups\n`,
    );
    // Signals are coalesced by the producer (one per 5 ms at most per process, so how many
    // arrive depends on how fast the producers append), and wake-ups arriving while a claim
    // runs share the next one: never a claim per event.
    expect(wakeups).toBeLessThan(ids.length);
    expect(wakeupClaims).toBeLessThanOrEqual(wakeups);
    expect(used).toBeLessThan(ids.length / 3);
  }, 70_000);
}
