import { Injectable } from '@nestjs/common';
import { NonRetryableError, OutboxBatchError, OutboxEvent, OutboxHandler } from 'nestjs-outbox';
import type { OutboxBatchContext } from 'nestjs-outbox';
import { createOutboxApp, TestApp } from '../support/outbox-app';
import { describeOnStores, eventually, StoreTarget } from '../support/store-targets';

type N = { n: number };

/** One recorded batch call: the events' keys and numbers, and the attempts the context gave. */
interface Call {
  events: { key: string | null; n: number; id: string }[];
  attempts: number[];
}

function record(calls: Call[], events: OutboxEvent<N>[], ctx: OutboxBatchContext): void {
  calls.push({
    events: events.map((e) => ({ key: e.key, n: e.payload.n, id: e.id })),
    attempts: ctx.deliveries.map((d) => d.attempt),
  });
}

const FAST = {
  pollInterval: 20,
  leaseMs: 2_000,
  backoff: { initialMs: 30, jitter: 0 },
};

/** docs/handlers.md, "Batch handlers": every store, through the real dispatcher. */
function batchHandlersOn(target: StoreTarget): void {
  let opened: Awaited<ReturnType<StoreTarget['open']>>;
  let t: TestApp | undefined;
  beforeAll(async () => {
    opened = await target.open();
  });
  afterEach(async () => {
    await t?.app.close();
    t = undefined;
  });
  afterAll(async () => {
    await opened?.close();
  });

  it('keeps per-key order inside and across batches, at most max events a call', async () => {
    const calls: Call[] = [];
    @Injectable()
    class Metrics {
      @OutboxHandler('b1.metric', { name: 'b1', batch: { max: 8 } })
      write(events: OutboxEvent<N>[], ctx: OutboxBatchContext) {
        record(calls, events, ctx);
      }
    }
    t = await createOutboxApp([Metrics], {
      store: opened.store,
      dispatcher: { ...FAST, enabled: false },
    });
    const keys = ['k1', 'k2', 'k3', 'k4'];
    // Interleaved keys (6 events each) and 40 without a key, appended in one order.
    const input = [
      ...Array.from({ length: 24 }, (_, i) => ({ key: keys[i % 4], n: i })),
      ...Array.from({ length: 40 }, (_, i) => ({ key: null, n: 100 + i })),
    ];
    await t.outbox.append(input.map(({ key, n }) => ({ type: 'b1.metric', key, payload: { n } })));
    await t.dispatcher.drain();
    const seen = calls.flatMap((c) => c.events);
    expect(seen.map((e) => e.n).sort((a, b) => a - b)).toEqual(input.map((e) => e.n));
    for (const call of calls) {
      expect(call.events.length).toBeLessThanOrEqual(8);
      // The store leases one delivery per handler and key at a time: never two in one batch.
      const keyed = call.events.filter((e) => e.key !== null).map((e) => e.key);
      expect(new Set(keyed).size).toBe(keyed.length);
    }
    // Batches were formed (not one event a call), and filled when enough was due.
    expect(Math.max(...calls.map((c) => c.events.length))).toBe(8);
    for (const key of keys) {
      const order = seen.filter((e) => e.key === key).map((e) => e.n);
      expect(order).toEqual(input.filter((e) => e.key === key).map((e) => e.n));
    }
    expect(t.dispatcher.stats()).toMatchObject({ succeeded: 64, failed: 0 });
  }, 30_000);

  it('two workers with batch handlers keep per-key order between them', async () => {
    const handled: { key: string | null; n: number; worker: string }[] = [];
    @Injectable()
    class Racing {
      @OutboxHandler('b6.metric', { name: 'b6', batch: { max: 5 } })
      async write(events: OutboxEvent<N>[], ctx: OutboxBatchContext) {
        // Yield between events so the two workers' batches interleave.
        for (const e of events) {
          handled.push({ key: e.key, n: e.payload.n, worker: ctx.workerId });
          await new Promise((resolve) => setImmediate(resolve));
        }
      }
    }
    // Each worker holds at most 1 + 2 × 5 deliveries: neither can take every key.
    const dispatcher = { ...FAST, concurrency: 1, batchSize: 5 };
    t = await createOutboxApp([Racing], { store: opened.store, dispatcher });
    const other = await createOutboxApp([Racing], { store: opened.store, dispatcher });
    try {
      const input = Array.from({ length: 160 }, (_, n) => ({ key: `k${n % 40}`, n }));
      for (let i = 0; i < input.length; i += 40) {
        // Each worker appends half: its own commits wake it at once.
        await (i % 80 === 0 ? t : other).outbox.append(
          input.slice(i, i + 40).map(({ key, n }) => ({ type: 'b6.metric', key, payload: { n } })),
        );
      }
      const done = () => t!.dispatcher.stats().succeeded + other.dispatcher.stats().succeeded;
      expect(await eventually(() => done() === 160, 20_000)).toBe(true);
      expect(handled).toHaveLength(160);
      for (let k = 0; k < 40; k++) {
        expect(handled.filter((h) => h.key === `k${k}`).map((h) => h.n)).toEqual(
          input.filter((e) => e.key === `k${k}`).map((e) => e.n),
        );
      }
      // Both workers took part.
      expect(new Set(handled.map((h) => h.worker)).size).toBe(2);
    } finally {
      await other.app.close();
    }
  }, 30_000);

  it('retries a failing batch, each event under its own attempt count', async () => {
    const calls: Call[] = [];
    @Injectable()
    class Flaky {
      @OutboxHandler('b2.metric', { name: 'b2', batch: { max: 10 }, maxAttempts: 3 })
      write(events: OutboxEvent<N>[], ctx: OutboxBatchContext) {
        record(calls, events, ctx);
        if (calls.length === 1) throw new Error('index unavailable');
      }
    }
    t = await createOutboxApp([Flaky], { store: opened.store, dispatcher: FAST });
    await t.outbox.append(
      Array.from({ length: 5 }, (_, n) => ({ type: 'b2.metric', key: `a${n}`, payload: { n } })),
    );
    expect(await eventually(() => t!.dispatcher.stats().succeeded === 5, 10_000)).toBe(true);
    const attempts = new Map<number, number[]>();
    for (const c of calls)
      c.events.forEach((e, i) => attempts.set(e.n, [...(attempts.get(e.n) ?? []), c.attempts[i]]));
    for (let n = 0; n < 5; n++) expect(attempts.get(n)).toEqual([1, 2]);
    expect(t.dispatcher.stats()).toMatchObject({ retried: 5, failed: 5, deadLettered: 0 });
    expect((await opened.store.listDeadLetters({ limit: 10, type: 'b2.metric' })).items).toEqual(
      [],
    );
  }, 30_000);

  it('dead-letters the events an OutboxBatchError names; the rest are acknowledged once', async () => {
    const calls: Call[] = [];
    @Injectable()
    class Indexer {
      @OutboxHandler('b3.metric', { name: 'b3', batch: { max: 10 }, maxAttempts: 2 })
      write(events: OutboxEvent<N>[], ctx: OutboxBatchContext) {
        record(calls, events, ctx);
        const failed = new Map<string, unknown>();
        for (const event of events) {
          if (event.payload.n === 1) failed.set(event.id, new NonRetryableError('malformed'));
          if (event.payload.n === 3) failed.set(event.id, new Error('mapping conflict'));
        }
        if (failed.size > 0) throw new OutboxBatchError(failed);
      }
    }
    t = await createOutboxApp([Indexer], { store: opened.store, dispatcher: FAST });
    const appended = await t.outbox.append(
      Array.from({ length: 6 }, (_, n) => ({ type: 'b3.metric', payload: { n } })),
    );
    expect(await eventually(() => t!.dispatcher.stats().deadLettered === 2, 10_000)).toBe(true);
    await t.dispatcher.drain();
    const runs = (n: number) => calls.flatMap((c) => c.events).filter((e) => e.n === n).length;
    // Neighbours ran once and were acknowledged; the retryable one ran maxAttempts times.
    expect([0, 1, 2, 3, 4, 5].map(runs)).toEqual([1, 1, 1, 2, 1, 1]);
    const { items } = await opened.store.listDeadLetters({ limit: 10, type: 'b3.metric' });
    const byEvent = new Map(items.map((d) => [d.eventId, d]));
    expect(byEvent.get(appended[1].id)).toMatchObject({ reason: 'rejected', attempts: 1 });
    expect(byEvent.get(appended[1].id)!.errors[0]).toMatchObject({
      name: 'NonRetryableError',
      message: 'malformed',
    });
    expect(byEvent.get(appended[3].id)).toMatchObject({ reason: 'exhausted', attempts: 2 });
    expect(byEvent.get(appended[3].id)!.errors.map((e) => e.message)).toEqual([
      'mapping conflict',
      'mapping conflict',
    ]);
    expect(items).toHaveLength(2);
    expect(t.dispatcher.stats()).toMatchObject({ succeeded: 4, deadLettered: 2, retried: 1 });
  }, 30_000);

  it('fans one type out to a batch handler and a single handler', async () => {
    const calls: Call[] = [];
    const single: number[] = [];
    @Injectable()
    class Both {
      @OutboxHandler('b4.metric', { name: 'b4-batch', batch: { max: 50 } })
      many(events: OutboxEvent<N>[], ctx: OutboxBatchContext) {
        record(calls, events, ctx);
      }

      @OutboxHandler('b4.metric', { name: 'b4-one' })
      one(event: OutboxEvent<N>) {
        single.push(event.payload.n);
      }
    }
    t = await createOutboxApp([Both], {
      store: opened.store,
      dispatcher: { ...FAST, enabled: false },
    });
    await t.outbox.append(
      Array.from({ length: 30 }, (_, n) => ({
        type: 'b4.metric',
        key: `k${n % 3}`,
        payload: { n },
      })),
    );
    await t.dispatcher.drain();
    const batched = calls.flatMap((c) => c.events.map((e) => e.n));
    const all = Array.from({ length: 30 }, (_, n) => n);
    expect([...batched].sort((a, b) => a - b)).toEqual(all);
    expect([...single].sort((a, b) => a - b)).toEqual(all);
    // Per key order holds for both handlers.
    for (const k of [0, 1, 2]) {
      const mine = all.filter((n) => n % 3 === k);
      expect(batched.filter((n) => n % 3 === k)).toEqual(mine);
      expect(single.filter((n) => n % 3 === k)).toEqual(mine);
    }
    expect(t.dispatcher.stats()).toMatchObject({ succeeded: 60 });
  }, 30_000);

  it('with max 1, calls the method with one event at a time', async () => {
    const calls: Call[] = [];
    @Injectable()
    class One {
      @OutboxHandler('b5.metric', { name: 'b5', batch: { max: 1 } })
      write(events: OutboxEvent<N>[], ctx: OutboxBatchContext) {
        record(calls, events, ctx);
      }
    }
    t = await createOutboxApp([One], {
      store: opened.store,
      dispatcher: { ...FAST, enabled: false },
    });
    await t.outbox.append(
      Array.from({ length: 12 }, (_, n) => ({
        type: 'b5.metric',
        key: `k${n % 2}`,
        payload: { n },
      })),
    );
    await t.dispatcher.drain();
    expect(calls).toHaveLength(12);
    expect(calls.every((c) => c.events.length === 1 && c.attempts[0] === 1)).toBe(true);
    const order = calls.map((c) => c.events[0].n);
    expect(order.filter((n) => n % 2 === 0)).toEqual([0, 2, 4, 6, 8, 10]);
    expect(order.filter((n) => n % 2 === 1)).toEqual([1, 3, 5, 7, 9, 11]);
  }, 30_000);
}

describeOnStores('batch handlers', 'bh', batchHandlersOn);
