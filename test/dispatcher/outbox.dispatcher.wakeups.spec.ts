import { Injectable } from '@nestjs/common';
import { MemoryOutboxStore, OutboxHandler } from 'nestjs-outbox';
import { createOutboxApp, deferred, TestApp, tick } from '../support/outbox-app';

/** A memory store with a wake-up channel the test fires by hand, and claims it holds open. */
class WakeableStore extends MemoryOutboxStore {
  listeners = new Set<() => void>();
  subscriptions = 0;
  claimGate: ReturnType<typeof deferred<void>> | null = null;
  claims = 0;
  publishing = 0;

  publishWakeups(): void {
    this.publishing++;
  }

  onWakeup(listener: () => void): () => Promise<void> {
    this.subscriptions++;
    this.listeners.add(listener);
    return async () => void this.listeners.delete(listener);
  }

  /** Another process committed appends. */
  signal(times = 1): void {
    for (let i = 0; i < times; i++) for (const l of this.listeners) l();
  }

  override async claim(...args: Parameters<MemoryOutboxStore['claim']>) {
    this.claims++;
    if (this.claimGate) await this.claimGate.promise;
    return super.claim(...args);
  }
}

@Injectable()
class Gated {
  static gates: ReturnType<typeof deferred<void>>[] = [];
  static ran = 0;
  static open = false;
  @OutboxHandler('w')
  async handle(): Promise<void> {
    Gated.ran++;
    if (Gated.open) return;
    const gate = deferred<void>();
    Gated.gates.push(gate);
    await gate.promise;
  }
}

/** docs/wakeups.md: one claim round per burst of wake-ups, never a queue of polls. */
describe('OutboxDispatcher wake-ups', () => {
  let t: TestApp | undefined;
  let store: WakeableStore;
  /** An appender in "another process": the same tables, but no in-process wake-up. */
  const appendElsewhere = (n: number) =>
    MemoryOutboxStore.prototype.append.call(
      store,
      Array.from({ length: n }, (_, i) => ({
        id: `00000000-0000-4000-8000-${String(Date.now() + i).padStart(12, '0')}`,
        type: 'w',
        payload: {},
        key: null,
        headers: {},
        occurredAt: new Date(),
        availableAt: null,
        handlers: ['Gated.handle'],
      })),
    );

  beforeEach(() => {
    jest.useFakeTimers({
      now: new Date('2026-06-01T00:00:00Z'),
      doNotFake: ['nextTick', 'setImmediate'],
    });
    store = new WakeableStore();
    // Appends here stand for another process's: they must not wake this dispatcher in-process.
    Object.defineProperty(store, 'onAppended', { value: undefined });
    Gated.gates = [];
    Gated.ran = 0;
    Gated.open = false;
  });
  afterEach(async () => {
    Gated.open = true;
    for (const g of Gated.gates) g.resolve();
    await t?.app.close();
    t = undefined;
    jest.useRealTimers();
  });

  const start = async (dispatcher: Record<string, unknown> = {}) => {
    t = await createOutboxApp([Gated], {
      store,
      dispatcher: { pollInterval: 60_000, concurrency: 2, batchSize: 2, ...dispatcher },
    });
    await tick(0);
  };

  it('claims at once on a signal from another process, long before the next poll', async () => {
    await start();
    const claims = store.claims;
    await appendElsewhere(1);
    store.signal();
    await tick(0);
    expect(store.claims).toBe(claims + 1);
    expect(Gated.ran).toBe(1);
    expect(t!.dispatcher.stats()).toMatchObject({ wakeups: 1, wakeupClaims: 1 });
  });

  it('a burst of signals while a claim is in flight costs one more claim when it returns', async () => {
    await start();
    store.claimGate = deferred<void>();
    store.signal();
    await tick(0);
    const claims = store.claims; // one claim in flight, held open
    await appendElsewhere(1);
    store.signal(100);
    await tick(0);
    expect(store.claims).toBe(claims); // no queue of polls, no second claim beside it
    const gate = store.claimGate;
    store.claimGate = null;
    gate.resolve();
    await tick(0);
    await tick(0);
    expect(store.claims).toBe(claims + 1); // exactly one round served the burst
    expect(Gated.ran).toBe(1);
    expect(t!.dispatcher.stats()).toMatchObject({ wakeups: 101, wakeupClaims: 2 });
  });

  it('a signal while every slot is taken is served when a slot frees', async () => {
    // concurrency 1, batch 1, claim ahead of 2: three deliveries fill it.
    await start({ concurrency: 1, batchSize: 1 });
    await appendElsewhere(3);
    store.signal();
    for (let i = 0; i < 5; i++) await tick(0);
    expect(Gated.ran).toBe(1);
    const claims = store.claims;
    await appendElsewhere(1);
    store.signal(10);
    await tick(0);
    expect(store.claims).toBe(claims); // nothing free: the wake-up waits as a flag
    Gated.gates.shift()!.resolve();
    for (let i = 0; i < 5; i++) await tick(0);
    expect(store.claims).toBe(claims + 1);
  });

  it('wakeups: false leaves the channel alone', async () => {
    await start({ wakeups: false });
    expect(store.subscriptions).toBe(0);
    expect(store.publishing).toBe(0);
    expect(t!.dispatcher.stats().wakeups).toBe(0);
  });

  it('a process that only appends (dispatcher off) signals but does not listen', async () => {
    await start({ enabled: false });
    expect(store.publishing).toBe(1);
    expect(store.subscriptions).toBe(0);
  });

  it('stops listening on shutdown', async () => {
    await start();
    expect(store.listeners.size).toBe(1);
    await t!.app.close();
    t = undefined;
    expect(store.listeners.size).toBe(0);
  });
});
