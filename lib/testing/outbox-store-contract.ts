import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { DuplicateEventError } from '../errors/duplicate-event.error';
import { LeaseLostError } from '../errors/lease-lost.error';
import {
  AppendableEvent,
  ClaimedDelivery,
  DeadLetterFilter,
  HandlerSubscription,
  OutboxStore,
} from '../interfaces/outbox-store.interface';
import { errorFingerprint } from '../stores/store-helpers';

/** What a contract-suite factory returns for each test: a fresh, empty store. */
export interface OutboxStoreContractContext {
  store: OutboxStore;
  /**
   * Lets store time pass. Stores with an injectable clock move it; stores that read a server clock
   * leave this out and the suite sleeps (it keeps such waits short).
   */
  advance?: (ms: number) => Promise<void>;
  /** Called after each test (close connections, drop data). */
  teardown?: () => Promise<void>;
}

export interface OutboxStoreContractOptions {
  /** Lease length used by the suite; keep it short for real-clock stores. @default 400 */
  leaseMs?: number;
  /** Claimers racing in the concurrency test. @default 8 */
  concurrentClaimers?: number;
  /** Events in the concurrency test. @default 400 */
  concurrentEvents?: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const HOUR = 3_600_000;

/**
 * Runs `fn` with the application clock (`Date.now`, `new Date()`) moved by `offsetMs` and still
 * ticking. Only `Date` is faked: timers, `nextTick` and the like stay real, so drivers work.
 */
async function withAppClock<T>(offsetMs: number, fn: () => Promise<T>): Promise<T> {
  jest.useFakeTimers({
    now: Date.now() + offsetMs,
    advanceTimers: true,
    doNotFake: [
      'hrtime',
      'nextTick',
      'performance',
      'queueMicrotask',
      'requestAnimationFrame',
      'cancelAnimationFrame',
      'requestIdleCallback',
      'cancelIdleCallback',
      'setImmediate',
      'clearImmediate',
      'setInterval',
      'clearInterval',
      'setTimeout',
      'clearTimeout',
    ],
  });
  try {
    return await fn();
  } finally {
    jest.useRealTimers();
  }
}

/** Runs `fn` over `items` with at most `width` calls in flight. */
async function inParallel<T>(items: T[], width: number, fn: (item: T) => Promise<unknown>) {
  for (let i = 0; i < items.length; i += width)
    await Promise.all(items.slice(i, i + width).map(fn));
}

/**
 * Registers the shared store contract (every store-level guarantee of the README Guarantees) as a jest
 * `describe` block. Run it against your own `OutboxStore` to check it behaves like ours.
 */
export function describeOutboxStoreContract(
  name: string,
  factory: () => Promise<OutboxStoreContractContext>,
  options: OutboxStoreContractOptions = {},
): void {
  const leaseMs = options.leaseMs ?? 400;

  describe(`OutboxStore contract: ${name}`, () => {
    let ctx: OutboxStoreContractContext;
    let store: OutboxStore;
    const advance = (ms: number) => (ctx.advance ? ctx.advance(ms) : sleep(ms));

    beforeEach(async () => {
      ctx = await factory();
      store = ctx.store;
    });
    afterEach(async () => {
      await ctx?.teardown?.();
    });

    const A: HandlerSubscription = { name: 'A.handle', types: ['t.one', 't.two'] };
    const B: HandlerSubscription = { name: 'B.handle', types: ['t.one'] };

    function event(overrides: Partial<AppendableEvent> = {}): AppendableEvent {
      return {
        id: randomUUID(),
        type: 't.one',
        payload: { n: 1 },
        key: null,
        headers: {},
        occurredAt: new Date('2026-01-01T00:00:00.000Z'),
        availableAt: null,
        handlers: ['A.handle', 'B.handle'],
        ...overrides,
      };
    }

    const claim = (
      handlers: HandlerSubscription[],
      limit = 100,
      workerId = 'w1',
      lease = leaseMs,
    ) => store.claim({ workerId, handlers, limit, leaseMs: lease });

    const err = (attempt: number, message = 'boom') => ({
      name: 'Error',
      message,
      attempt,
      workerId: 'w1',
    });

    async function ackAll(claimed: ClaimedDelivery[]) {
      for (const c of claimed) await store.ack(c.lease);
    }

    describe('append', () => {
      it('stores events and returns them with ids, payload and headers unchanged', async () => {
        const payload = {
          text: 'héllo wörld — 日本語 🎉',
          nested: { list: [1, 2.5, null, true], empty: {} },
        };
        const e = event({ payload, key: 'k-1', headers: { traceparent: '00-abc', tenant: 't1' } });
        const [stored] = await store.append([e]);
        expect(stored.id).toBe(e.id);
        expect(stored.payload).toEqual(payload);
        expect(stored.availableAt).toBeInstanceOf(Date);
        const claimed = await claim([A]);
        expect(claimed).toHaveLength(1);
        expect(claimed[0].event).toMatchObject({
          id: e.id,
          type: 't.one',
          key: 'k-1',
          payload,
          headers: e.headers,
        });
        expect(claimed[0].event.occurredAt.toISOString()).toBe('2026-01-01T00:00:00.000Z');
      });

      it('round-trips JSON payloads of every shape', async () => {
        const payloads = [null, 0, -1.5, 'text', true, [], [1, 'two'], { a: { b: { c: [{}] } } }];
        const events = payloads.map((payload) => event({ payload, handlers: ['A.handle'] }));
        await store.append(events);
        const claimed = await claim([A]);
        const byId = new Map(claimed.map((c) => [c.event.id, c.event.payload]));
        events.forEach((e) => expect(byId.get(e.id)).toEqual(e.payload));
      });

      it('is a no-op for an id appended again with identical content', async () => {
        const e = event({ payload: { a: 1, b: 2 } });
        await store.append([e]);
        const again = await store.append([{ ...e, payload: { b: 2, a: 1 } }]);
        expect(again[0].id).toBe(e.id);
        expect(await claim([A, B])).toHaveLength(2);
      });

      it('compares an id appended again without its trace-context headers (a retry in another span is a no-op)', async () => {
        const e = event({
          headers: {
            tenant: 't1',
            traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
          },
        });
        await store.append([e]);
        const retried = {
          ...e,
          headers: {
            tenant: 't1',
            traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
            tracestate: 'vendor=1',
            baggage: 'user=2',
          },
        };
        const [again] = await store.append([retried]);
        expect(again.id).toBe(e.id);
        await expect(
          store.append([{ ...retried, headers: { tenant: 't2', traceparent: 'x' } }]),
        ).rejects.toBeInstanceOf(DuplicateEventError);
        const claimed = await claim([A]);
        expect(claimed.map((c) => c.event.headers)).toEqual([e.headers]);
      });

      it('refuses an id appended again with different content and writes nothing of the batch', async () => {
        const e = event();
        await store.append([e]);
        const other = event();
        await expect(store.append([other, { ...e, payload: { n: 2 } }])).rejects.toBeInstanceOf(
          DuplicateEventError,
        );
        const claimed = await claim([A]);
        expect(claimed.map((c) => c.event.id)).toEqual([e.id]);
      });

      it('tells onAppended listeners about committed appends (when implemented)', async () => {
        if (!store.onAppended) return;
        let calls = 0;
        const unsubscribe = store.onAppended(() => calls++);
        await store.append([event()]);
        expect(calls).toBeGreaterThanOrEqual(1);
        unsubscribe();
        const before = calls;
        await store.append([event()]);
        expect(calls).toBe(before);
      });

      it('holds an event until its availableAt', async () => {
        const now = await store.now();
        await store.append([
          event({ availableAt: new Date(now.getTime() + leaseMs), handlers: ['A.handle'] }),
        ]);
        expect(await claim([A])).toHaveLength(0);
        await advance(leaseMs + 50);
        expect(await claim([A])).toHaveLength(1);
      });
    });

    describe('claim', () => {
      it('claims only the types it has handlers for; others wait and are counted', async () => {
        await store.append([
          event({ type: 'other.type', handlers: [] }),
          event({ type: 't.two', handlers: ['A.handle'] }),
        ]);
        const claimed = await claim([B]);
        expect(claimed).toHaveLength(0);
        const mine = await claim([A]);
        expect(mine.map((c) => c.event.type)).toEqual(['t.two']);
        const stats = await store.stats();
        expect(stats.byType['other.type']?.pending).toBe(1);
      });

      it('creates one delivery per handler; a failing handler never re-runs the other', async () => {
        await store.append([event()]);
        const claimed = await claim([A, B]);
        expect(claimed.map((c) => c.handler).sort()).toEqual(['A.handle', 'B.handle']);
        const a = claimed.find((c) => c.handler === 'A.handle')!;
        const b = claimed.find((c) => c.handler === 'B.handle')!;
        await store.ack(a.lease);
        await store.retry(b.lease, 0, err(1));
        const again = await claim([A, B], 100, 'w1', 60_000);
        expect(again.map((c) => c.handler)).toEqual(['B.handle']);
        expect(again[0].attempt).toBe(2);
      });

      it('expands an event appended without known handlers into the claiming worker’s handlers', async () => {
        const e = event({ handlers: [] });
        await store.append([e]);
        const claimed = await claim([A, B]);
        expect(claimed.map((c) => c.handler).sort()).toEqual(['A.handle', 'B.handle']);
        expect(new Set(claimed.map((c) => c.id)).size).toBe(2);
        await ackAll(claimed);
        expect(await claim([A, B])).toHaveLength(0);
      });

      it('respects the limit and claims oldest first', async () => {
        const events = Array.from({ length: 5 }, (_, i) =>
          event({ payload: { i }, handlers: ['A.handle'] }),
        );
        for (const e of events) await store.append([e]);
        const first = await claim([A], 3);
        expect(first.map((c) => c.event.id)).toEqual(events.slice(0, 3).map((e) => e.id));
        const rest = await claim([A], 3);
        expect(rest.map((c) => c.event.id)).toEqual(events.slice(3).map((e) => e.id));
      });

      it('gives each claim a fresh lease owned by the worker', async () => {
        await store.append([event({ handlers: ['A.handle'] })]);
        const [c] = await claim([A], 1, 'worker-x');
        expect(c.lease.owner).toBe('worker-x');
        expect(c.lease.deliveryId).toBe(c.id);
        expect(c.lease.token).toBeTruthy();
        const now = await store.now();
        expect(c.lease.leaseUntil.getTime()).toBeGreaterThan(now.getTime());
        expect(c.attempt).toBe(1);
      });
    });

    describe('fencing and leases', () => {
      it('refuses ack, retry, deadLetter and renew with a wrong owner or token', async () => {
        await store.append([event({ handlers: ['A.handle'] })]);
        const [c] = await claim([A]);
        const forged = [
          { ...c.lease, token: randomUUID() },
          { ...c.lease, owner: 'intruder' },
        ];
        for (const lease of forged) {
          await expect(store.ack(lease)).rejects.toBeInstanceOf(LeaseLostError);
          await expect(store.retry(lease, 0, err(1))).rejects.toBeInstanceOf(LeaseLostError);
          await expect(store.deadLetter(lease, 'rejected', err(1))).rejects.toBeInstanceOf(
            LeaseLostError,
          );
          await expect(store.renew(lease, leaseMs)).rejects.toBeInstanceOf(LeaseLostError);
          await expect(store.release(lease)).rejects.toBeInstanceOf(LeaseLostError);
        }
        await store.ack(c.lease);
        await expect(store.ack(c.lease)).rejects.toBeInstanceOf(LeaseLostError);
      });

      it('lets another worker reclaim an expired lease and fences the old owner out', async () => {
        await store.append([event({ handlers: ['A.handle'] })]);
        const [old] = await claim([A], 10, 'w-old');
        expect(await claim([A], 10, 'w-new')).toHaveLength(0);
        await advance(leaseMs + 50);
        await expect(store.ack(old.lease)).rejects.toBeInstanceOf(LeaseLostError);
        const [fresh] = await claim([A], 10, 'w-new');
        expect(fresh.id).toBe(old.id);
        expect(fresh.attempt).toBe(2);
        await expect(store.ack(old.lease)).rejects.toBeInstanceOf(LeaseLostError);
        await expect(store.retry(old.lease, 0, err(1))).rejects.toBeInstanceOf(LeaseLostError);
        await expect(store.deadLetter(old.lease, 'exhausted', err(1))).rejects.toBeInstanceOf(
          LeaseLostError,
        );
        await expect(store.renew(old.lease, leaseMs)).rejects.toBeInstanceOf(LeaseLostError);
        await store.ack(fresh.lease);
      });

      it('acknowledges a batch with ackMany, fencing each lease on its own (when implemented)', async () => {
        if (!store.ackMany) return;
        await store.append(
          [1, 2, 3, 4].map((n) => event({ payload: { n }, handlers: ['A.handle'] })),
        );
        const claimed = await claim([A], 10, 'w1');
        expect(claimed).toHaveLength(4);
        const [a, b, c, d] = claimed;
        await store.ack(d.lease);
        const acked = await store.ackMany([
          a.lease,
          { ...b.lease, token: randomUUID() },
          c.lease,
          d.lease,
        ]);
        expect(acked.sort()).toEqual([a.id, c.id].sort());
        expect(await store.ackMany([])).toEqual([]);
        // b was fenced out and is unchanged: still leased by w1, acked with its real lease.
        expect(await claim([A], 10, 'w2')).toHaveLength(0);
        await store.ack(b.lease);
        expect(await store.stats()).toMatchObject({ pending: 0, leased: 0 });
      });

      it('refuses ackMany on an expired lease that another worker took', async () => {
        if (!store.ackMany) return;
        await store.append([event({ handlers: ['A.handle'] })]);
        const [old] = await claim([A], 10, 'w-old');
        await advance(leaseMs + 50);
        const [fresh] = await claim([A], 10, 'w-new');
        expect(await store.ackMany([old.lease])).toEqual([]);
        expect(await store.ackMany([fresh.lease])).toEqual([fresh.id]);
      });

      it('keeps a renewed lease past its first expiry', async () => {
        await store.append([event({ handlers: ['A.handle'] })]);
        const [c] = await claim([A], 10, 'w1');
        await advance(leaseMs / 2);
        const renewed = await store.renew(c.lease, leaseMs * 2);
        expect(renewed.leaseUntil.getTime()).toBeGreaterThan(c.lease.leaseUntil.getTime());
        await advance(leaseMs / 2 + 50);
        expect(await claim([A], 10, 'w2')).toHaveLength(0);
        await store.ack(renewed);
      });

      it('releases an unstarted claim without counting the attempt', async () => {
        await store.append([event({ handlers: ['A.handle'] })]);
        const [c] = await claim([A]);
        await store.release(c.lease);
        const [again] = await claim([A]);
        expect(again.id).toBe(c.id);
        expect(again.attempt).toBe(1);
      });

      it('never hands one delivery to two concurrent claimers', async () => {
        const claimers = options.concurrentClaimers ?? 8;
        const total = options.concurrentEvents ?? 400;
        const events = Array.from({ length: total }, (_, i) =>
          event({ payload: { i }, handlers: ['A.handle'], key: i % 5 === 0 ? `k${i % 7}` : null }),
        );
        for (let i = 0; i < events.length; i += 100) await store.append(events.slice(i, i + 100));
        const seen = new Map<string, string>();
        let duplicates = 0;
        let rounds = 0;
        while (seen.size < total && rounds++ < 200) {
          const batches = await Promise.all(
            Array.from({ length: claimers }, (_, w) => claim([A], 25, `w${w}`, 60_000)),
          );
          for (const batch of batches) {
            for (const c of batch) {
              if (seen.has(c.id)) duplicates++;
              seen.set(c.id, c.event.id);
            }
          }
          await Promise.all(batches.flat().map((c) => store.ack(c.lease)));
        }
        expect(duplicates).toBe(0);
        expect(new Set(seen.values()).size).toBe(total);
      });
    });

    describe('per-key order', () => {
      it('holds later events of a key while an earlier one is pending, leased or waiting to retry', async () => {
        const [e1, e2, e3] = [1, 2, 3].map((n) =>
          event({ key: 'order-1', payload: { n }, handlers: ['A.handle'] }),
        );
        await store.append([e1]);
        await store.append([e2, e3]);
        const other = event({ key: 'order-2', handlers: ['A.handle'] });
        await store.append([other]);
        const first = await claim([A]);
        expect(first.map((c) => c.event.id)).toEqual([e1.id, other.id]);
        await store.ack(first[1].lease);
        expect(await claim([A])).toHaveLength(0);
        await store.retry(first[0].lease, leaseMs, err(1));
        expect(await claim([A])).toHaveLength(0);
        await advance(leaseMs + 50);
        const retried = await claim([A]);
        expect(retried.map((c) => c.event.id)).toEqual([e1.id]);
        await store.ack(retried[0].lease);
        const second = await claim([A]);
        expect(second.map((c) => c.event.id)).toEqual([e2.id]);
        await store.ack(second[0].lease);
        expect((await claim([A])).map((c) => c.event.id)).toEqual([e3.id]);
      });

      it('orders per handler: one handler’s backlog does not hold another', async () => {
        const [e1, e2] = [1, 2].map((n) => event({ key: 'k', payload: { n } }));
        await store.append([e1, e2]);
        const first = await claim([A, B]);
        const a1 = first.find((c) => c.handler === 'A.handle')!;
        const b1 = first.find((c) => c.handler === 'B.handle')!;
        expect([a1.event.id, b1.event.id]).toEqual([e1.id, e1.id]);
        await store.ack(b1.lease);
        const next = await claim([A, B]);
        expect(next.map((c) => [c.handler, c.event.id])).toEqual([['B.handle', e2.id]]);
        await store.ack(a1.lease);
      });

      it('releases the key when the earlier delivery is dead-lettered', async () => {
        const [e1, e2] = [1, 2].map((n) =>
          event({ key: 'k', payload: { n }, handlers: ['A.handle'] }),
        );
        await store.append([e1, e2]);
        const [c1] = await claim([A]);
        await store.deadLetter(c1.lease, 'rejected', err(1));
        expect((await claim([A])).map((c) => c.event.id)).toEqual([e2.id]);
      });
      it('holds a later event behind an earlier one of its key that is not expanded yet', async () => {
        // An API-only process (no handler for the type) appended a backlog and then E1; a process
        // that knows the handler appended E2 with the same key. E1 must still come first.
        const tomorrow = new Date((await store.now()).getTime() + 86_400_000);
        const backlog = Array.from({ length: 600 }, (_, i) =>
          event({ key: `other-${i}`, handlers: [], availableAt: tomorrow }),
        );
        for (let i = 0; i < backlog.length; i += 200) await store.append(backlog.slice(i, i + 200));
        const e1 = event({ key: 'k', handlers: [] });
        const e2 = event({ key: 'k', handlers: ['A.handle'] });
        await store.append([e1]);
        await store.append([e2]);
        const first = await claim([A], 10);
        expect(first.map((c) => c.event.id)).toEqual([e1.id]);
        await store.ack(first[0].lease);
        expect((await claim([A], 10)).map((c) => c.event.id)).toEqual([e2.id]);
      });

      it('puts a replayed dead letter back in its original place in the key order', async () => {
        const [e1, e2, e3] = [1, 2, 3].map((n) =>
          event({ key: 'k', payload: { n }, handlers: ['A.handle'] }),
        );
        await store.append([e1, e2, e3]);
        const [c1] = await claim([A]);
        await store.deadLetter(c1.lease, 'rejected', err(1));
        const [c2] = await claim([A]);
        expect(c2.event.id).toBe(e2.id);
        await store.ack(c2.lease);
        expect(await store.replay({ ids: [c1.id] })).toBe(1);
        const next = await claim([A]);
        expect(next.map((c) => c.event.id)).toEqual([e1.id]);
        await store.ack(next[0].lease);
        expect((await claim([A])).map((c) => c.event.id)).toEqual([e3.id]);
      });

      /** E1 dead-lettered, E2 claimed (running), then E1 replayed: returns E1's and E2's claims. */
      async function replayBehindRunning() {
        const [e1, e2, e3] = [1, 2, 3].map((n) =>
          event({ key: 'k', payload: { n }, handlers: ['A.handle'] }),
        );
        await store.append([e1, e2, e3]);
        const [c1] = await claim([A]);
        await store.deadLetter(c1.lease, 'rejected', err(1));
        const [c2] = await claim([A], 100, 'w2', 60_000);
        expect(c2.event.id).toBe(e2.id);
        expect(await store.replay({ ids: [c1.id] })).toBe(1);
        return { e1, e2, e3, c2 };
      }

      it('never claims a replayed dead letter while a later delivery of its key is running; it goes first once that one is acknowledged', async () => {
        const { e1, e3, c2 } = await replayBehindRunning();
        expect(await claim([A])).toHaveLength(0);
        await store.ack(c2.lease);
        const next = await claim([A]);
        expect(next.map((c) => c.event.id)).toEqual([e1.id]);
        await store.ack(next[0].lease);
        expect((await claim([A])).map((c) => c.event.id)).toEqual([e3.id]);
      });

      it('lets a replayed dead letter run before a later delivery of its key whose attempt failed', async () => {
        const { e1, e2, c2 } = await replayBehindRunning();
        expect(await claim([A])).toHaveLength(0);
        await store.retry(c2.lease, 0, err(1, 'later one failed'));
        const next = await claim([A]);
        expect(next.map((c) => c.event.id)).toEqual([e1.id]);
        expect(await claim([A])).toHaveLength(0);
        await store.ack(next[0].lease);
        expect((await claim([A])).map((c) => c.event.id)).toEqual([e2.id]);
      });

      it('holds several replayed dead letters of a key behind a later delivery that is running, then runs them in order', async () => {
        const events = [1, 2, 3, 4].map((n) =>
          event({ key: 'k', payload: { n }, handlers: ['A.handle'] }),
        );
        await store.append(events);
        const dead: string[] = [];
        for (let i = 0; i < 2; i++) {
          const [c] = await claim([A]);
          await store.deadLetter(c.lease, 'rejected', err(1));
          dead.push(c.id);
        }
        const [running] = await claim([A], 100, 'w2', 60_000);
        expect(running.event.id).toBe(events[2].id);
        expect(await store.replay({ ids: [dead[1]] })).toBe(1);
        expect(await store.replay({ ids: [dead[0]] })).toBe(1);
        expect(await claim([A])).toHaveLength(0);
        await store.ack(running.lease);
        for (const e of [events[0], events[1], events[3]]) {
          const next = await claim([A]);
          expect(next.map((c) => c.event.id)).toEqual([e.id]);
          await store.ack(next[0].lease);
        }
      });

      it('lets a replayed dead letter run once the lease of a later delivery of its key expired', async () => {
        const [e1, e2] = [1, 2].map((n) =>
          event({ key: 'k', payload: { n }, handlers: ['A.handle'] }),
        );
        await store.append([e1, e2]);
        const [c1] = await claim([A]);
        await store.deadLetter(c1.lease, 'rejected', err(1));
        const [c2] = await claim([A], 100, 'w2');
        expect(c2.event.id).toBe(e2.id);
        expect(await store.replay({ ids: [c1.id] })).toBe(1);
        expect(await claim([A])).toHaveLength(0);
        await advance(leaseMs + 50);
        const next = await claim([A]);
        expect(next.map((c) => c.event.id)).toEqual([e1.id]);
        await store.ack(next[0].lease);
        expect((await claim([A])).map((c) => c.event.id)).toEqual([e2.id]);
      });
    });

    describe('retry', () => {
      it('schedules a retry by the store clock and counts attempts', async () => {
        await store.append([event({ handlers: ['A.handle'] })]);
        const [c] = await claim([A]);
        await store.retry(c.lease, leaseMs, err(1));
        expect(await claim([A])).toHaveLength(0);
        const stats = await store.stats();
        expect(stats.pending).toBe(1);
        expect(stats.due).toBe(0);
        await advance(leaseMs + 50);
        const [again] = await claim([A]);
        expect(again.attempt).toBe(2);
      });
    });

    describe('dead letters', () => {
      async function makeDead(overrides: Partial<AppendableEvent> = {}, handler = A) {
        const e = event({ handlers: [handler.name], ...overrides });
        await store.append([e]);
        const [c] = await claim([handler]);
        await store.retry(c.lease, 0, err(1, 'first failure'));
        const [c2] = await claim([handler]);
        await store.deadLetter(c2.lease, 'exhausted', err(2, 'order 42 not found'));
        return { event: e, deliveryId: c.id };
      }

      it('keeps the error history and is never claimed again on its own', async () => {
        const { event: e, deliveryId } = await makeDead({ key: 'k1', headers: { h: 'v' } });
        expect(await claim([A])).toHaveLength(0);
        const dl = await store.getDeadLetter(deliveryId);
        expect(dl).toMatchObject({
          id: deliveryId,
          eventId: e.id,
          type: 't.one',
          key: 'k1',
          handler: 'A.handle',
          attempts: 2,
          reason: 'exhausted',
          payload: e.payload,
          headers: { h: 'v' },
        });
        expect(dl!.errors.map((x) => [x.message, x.attempt])).toEqual([
          ['first failure', 1],
          ['order 42 not found', 2],
        ]);
        expect(dl!.errors[0].at).toBeInstanceOf(Date);
        expect(dl!.deadAt).toBeInstanceOf(Date);
        expect(await store.getDeadLetter(randomUUID())).toBeNull();
        await advance(leaseMs + 50);
        expect(await claim([A])).toHaveLength(0);
        expect((await store.stats()).dead).toBe(1);
      });

      it('records reason rejected', async () => {
        await store.append([event({ handlers: ['A.handle'] })]);
        const [c] = await claim([A]);
        await store.deadLetter(c.lease, 'rejected', {
          name: 'NonRetryableError',
          message: 'bad',
          attempt: 1,
          workerId: 'w1',
        });
        expect(await store.getDeadLetter(c.id)).toMatchObject({ reason: 'rejected', attempts: 1 });
      });

      it('replays by id with the same event id and attempts reset', async () => {
        const { event: e, deliveryId } = await makeDead();
        expect(await store.replay({ ids: [deliveryId] })).toBe(1);
        expect(await store.getDeadLetter(deliveryId)).toBeNull();
        const [c] = await claim([A]);
        expect(c.event.id).toBe(e.id);
        expect(c.attempt).toBe(1);
        await store.ack(c.lease);
        expect(await store.replay({ ids: [deliveryId] })).toBe(0);
      });

      it('replays by list of ids, ignoring unknown ones', async () => {
        const d1 = await makeDead();
        const d2 = await makeDead();
        const d3 = await makeDead();
        expect(await store.replay({ ids: [d1.deliveryId, d3.deliveryId, randomUUID()] })).toBe(2);
        const claimed = await claim([A]);
        expect(claimed.map((c) => c.event.id).sort()).toEqual([d1.event.id, d3.event.id].sort());
        expect(await store.getDeadLetter(d2.deliveryId)).not.toBeNull();
      });

      it('replays by filter: type, handler, key and failedBefore', async () => {
        const one = await makeDead({ type: 't.one', key: 'x' });
        const two = await makeDead({ type: 't.two', key: 'y' });
        const b = await makeDead({ type: 't.one', key: 'z' }, B);
        expect(await store.replay({ filter: { type: 't.two' } })).toBe(1);
        expect(await store.getDeadLetter(two.deliveryId)).toBeNull();
        expect(await store.replay({ filter: { handler: 'B.handle' } })).toBe(1);
        expect(await store.getDeadLetter(b.deliveryId)).toBeNull();
        const past = new Date((await store.now()).getTime() - 60_000);
        expect(await store.replay({ filter: { failedBefore: past } })).toBe(0);
        expect(await store.replay({ filter: { key: 'x' } })).toBe(1);
        expect(await store.getDeadLetter(one.deliveryId)).toBeNull();
      });

      it('replays at a given time', async () => {
        const { deliveryId } = await makeDead();
        const at = new Date((await store.now()).getTime() + leaseMs);
        expect(await store.replay({ ids: [deliveryId] }, at)).toBe(1);
        expect(await claim([A])).toHaveLength(0);
        await advance(leaseMs + 50);
        expect(await claim([A])).toHaveLength(1);
      });

      it('purges by id and by filter', async () => {
        const d1 = await makeDead({ type: 't.one' });
        const d2 = await makeDead({ type: 't.two' });
        const d3 = await makeDead({ type: 't.two' });
        expect(await store.purge({ ids: [d1.deliveryId] })).toBe(1);
        expect(await store.getDeadLetter(d1.deliveryId)).toBeNull();
        expect(await store.purge({ filter: { type: 't.two' } })).toBe(2);
        expect(await store.getDeadLetter(d2.deliveryId)).toBeNull();
        expect(await store.getDeadLetter(d3.deliveryId)).toBeNull();
        expect((await store.stats()).dead).toBe(0);
        expect(await store.replay({ filter: {} })).toBe(0);
      });

      it('matches nothing with a null type, handler or key in a filter (never everything)', async () => {
        // The interface never passes null (the admin API refuses it); a store given one anyway
        // reads it as SQL reads `= NULL`.
        const keyless = await makeDead({ key: null });
        const keyed = await makeDead({ key: 'k' });
        for (const field of ['type', 'handler', 'key'] as const) {
          const filter = { [field]: null } as unknown as DeadLetterFilter;
          expect(await store.purge({ filter })).toBe(0);
          expect(await store.replay({ filter })).toBe(0);
        }
        expect(await store.getDeadLetter(keyless.deliveryId)).not.toBeNull();
        expect(await store.getDeadLetter(keyed.deliveryId)).not.toBeNull();
      });

      it('counts an id given twice once, in replay and in purge', async () => {
        const d1 = await makeDead();
        const d2 = await makeDead();
        expect(await store.replay({ ids: [d1.deliveryId, d1.deliveryId] })).toBe(1);
        expect(await store.purge({ ids: [d2.deliveryId, d2.deliveryId, d2.deliveryId] })).toBe(1);
        const claimed = await claim([A]);
        expect(claimed.map((c) => c.event.id)).toEqual([d1.event.id]);
        expect((await store.stats()).dead).toBe(0);
      });

      it('replays and purges by filter more dead letters than one batch, reporting the exact total', async () => {
        // The SQL stores work in batches of 1,000 ids, Redis in scripts of 500.
        const perType = 1_100;
        const events = Array.from({ length: 2 * perType }, (_, i) =>
          event({ type: i % 2 ? 't.two' : 't.one', payload: { i }, handlers: ['A.handle'] }),
        );
        for (let i = 0; i < events.length; i += 500) await store.append(events.slice(i, i + 500));
        let dead = 0;
        for (let round = 0; dead < events.length && round < 20; round++) {
          const claimed = await claim([A], 500, 'w1', 120_000);
          await inParallel(claimed, 25, (c) => store.deadLetter(c.lease, 'rejected', err(1)));
          dead += claimed.length;
        }
        expect(dead).toBe(events.length);
        expect(await store.replay({ filter: { type: 't.one' } })).toBe(perType);
        expect(await store.purge({ filter: { type: 't.two' } })).toBe(perType);
        expect(await store.replay({ filter: {} })).toBe(0);
        const stats = await store.stats();
        expect(stats).toMatchObject({ pending: perType, dead: 0, leased: 0 });
        expect((await store.listDeadLetters({ limit: 10 })).items).toHaveLength(0);
        const replayed = new Set<string>();
        for (let round = 0; round < 20; round++) {
          const claimed = await claim([A], 500, 'w1', 120_000);
          if (claimed.length === 0) break;
          for (const c of claimed) {
            expect(c.event.type).toBe('t.one');
            expect(c.attempt).toBe(1);
            replayed.add(c.event.id);
          }
          await inParallel(claimed, 25, (c) => store.ack(c.lease));
        }
        expect(replayed.size).toBe(perType);
      }, 180_000);

      it('replays each dead letter of a filter once while workers dead-letter them again', async () => {
        // A bulk replay works in batches; deliveries it replayed that fail again at once become
        // newer dead letters of the same filter. They are not part of this replay: counting or
        // replaying them again could keep the call going for as long as the handler fails.
        const count = 1_100;
        const events = Array.from({ length: count }, (_, i) =>
          event({ payload: { i }, handlers: ['A.handle'] }),
        );
        for (let i = 0; i < events.length; i += 550) await store.append(events.slice(i, i + 550));
        for (let round = 0; round < 10; round++) {
          const claimed = await claim([A], 550, 'w1', 120_000);
          if (claimed.length === 0) break;
          await inParallel(claimed, 25, (c) => store.deadLetter(c.lease, 'rejected', err(1)));
        }
        expect((await store.stats()).dead).toBe(count);
        await advance(5);
        let replaying = true;
        const failing = (async () => {
          while (replaying) {
            const claimed = await claim([A], 200, 'w2', 120_000);
            await inParallel(claimed, 25, (c) => store.deadLetter(c.lease, 'rejected', err(1)));
            if (claimed.length === 0) await sleep(1);
          }
        })();
        let replayed: number;
        try {
          replayed = await store.replay({ filter: { type: 't.one' } });
        } finally {
          replaying = false;
          await failing;
        }
        expect(replayed).toBe(count);
      }, 180_000);

      it('pages through dead letters with a keyset cursor, no gaps or repeats', async () => {
        const ids = new Set<string>();
        for (let i = 0; i < 23; i++)
          ids.add((await makeDead({ type: i % 2 ? 't.one' : 't.two' })).deliveryId);
        const seen: string[] = [];
        let cursor: string | undefined;
        let pages = 0;
        do {
          const page = await store.listDeadLetters({ limit: 10, cursor });
          seen.push(...page.items.map((d) => d.id));
          cursor = page.nextCursor ?? undefined;
          pages++;
        } while (cursor && pages < 10);
        expect(pages).toBe(3);
        expect(seen).toHaveLength(23);
        expect(new Set(seen)).toEqual(ids);
        const filtered = await store.listDeadLetters({ limit: 100, type: 't.one' });
        expect(filtered.items).toHaveLength(11);
        expect(filtered.nextCursor).toBeNull();
        expect(filtered.items.every((d) => d.type === 't.one')).toBe(true);
      });

      it('summarizes dead letters by type, handler and error fingerprint', async () => {
        await makeDead({ type: 't.one' });
        await makeDead({ type: 't.one' });
        await makeDead({ type: 't.two' });
        const rows = await store.summarizeDeadLetters({});
        expect(rows).toEqual(
          expect.arrayContaining([
            expect.objectContaining({
              type: 't.one',
              handler: 'A.handle',
              errorName: 'Error',
              count: 2,
            }),
            expect.objectContaining({ type: 't.two', handler: 'A.handle', count: 1 }),
          ]),
        );
        expect(rows[0].fingerprint).toBe('order <n> not found');
      });

      it('summarizes by the last error exactly as the dead letter stores it, whatever its text', async () => {
        // The SQL stores read the last error out of the JSON history in SQL: escapes, non-ASCII
        // text and JSON-looking text must come out as the dead letter itself shows them.
        const texts = [
          'quote " backslash \\ slash / newline \n tab \t',
          'ünïcødé 日本語 😀 4711',
          '{"looks":"like json"}',
          '[]',
          '123',
          'null',
          `order ${randomUUID()} failed ${'x'.repeat(300)} 42`,
        ];
        const expected = new Map<string, number>();
        for (const text of texts) {
          const e = event({ type: 't.text', handlers: [A.name] });
          await store.append([e]);
          const [c] = await claim([A]);
          await store.retry(c.lease, 0, err(1, 'an earlier failure'));
          const [c2] = await claim([A]);
          await store.deadLetter(c2.lease, 'rejected', {
            name: text.slice(0, 40),
            message: text,
            attempt: 2,
            workerId: 'w1',
          });
          const last = (await store.getDeadLetter(c.id))!.errors.at(-1)!;
          expect([last.name, last.message]).toEqual([text.slice(0, 40), text]);
          const k = JSON.stringify([last.name, errorFingerprint(last.message)]);
          expected.set(k, (expected.get(k) ?? 0) + 1);
        }
        const rows = await store.summarizeDeadLetters({ type: 't.text' });
        expect(
          new Map(rows.map((r) => [JSON.stringify([r.errorName, r.fingerprint]), r.count])),
        ).toEqual(expected);
        expect(rows.every((r) => r.type === 't.text' && r.handler === A.name)).toBe(true);
      });
    });

    describe('store clock', () => {
      // README Guarantees 5: due times, leases, retries and retention follow the store clock, so an
      // application clock hours off (a VM resumed, a bad NTP) changes none of them.
      for (const [label, offset] of [
        ['3 h ahead', 3 * HOUR],
        ['3 h behind', -3 * HOUR],
      ] as const) {
        it(`keeps due times, leases, retries and retention on the store clock with the app clock ${label}`, async () => {
          await withAppClock(offset, async () => {
            // A store whose clock is the app clock (the memory store by default) moves with it;
            // every check below is against the store's own now().
            const storeNow = (await store.now()).getTime();

            // Appended without availableAt: due at once by the store clock.
            const due = event({ handlers: ['A.handle'] });
            const [stored] = await store.append([due]);
            expect(Math.abs(stored.availableAt.getTime() - storeNow)).toBeLessThan(60_000);
            // Due in 1 h by the store clock: not claimable, even with the app clock 3 h ahead.
            const later = new Date(storeNow + HOUR);
            await store.append([event({ handlers: ['A.handle'], availableAt: later })]);
            // Unexpanded (no handlers known at append): due at once too.
            const unexpanded = event({ type: 't.two', handlers: [] });
            await store.append([unexpanded]);

            const first = await claim([A], 10, 'w1', 60_000);
            expect(first.map((c) => c.event.id).sort()).toEqual([due.id, unexpanded.id].sort());
            for (const c of first) {
              const until = c.lease.leaseUntil.getTime() - storeNow;
              expect(until).toBeGreaterThan(50_000);
              expect(until).toBeLessThan(120_000);
            }
            // A 60 s lease holds against another worker right after.
            expect(await claim([A], 10, 'w2', 60_000)).toHaveLength(0);
            const [c1, c2] = first;
            const renewed = await store.renew(c1.lease, 60_000);
            expect(Math.abs(renewed.leaseUntil.getTime() - storeNow - 60_000)).toBeLessThan(60_000);
            // A retry 1 h out waits 1 h by the store clock.
            await store.retry(renewed, HOUR, err(1));
            expect(await claim([A], 10, 'w2', 60_000)).toHaveLength(0);
            expect((await store.stats()).due).toBe(0);

            // A fresh dead letter survives a retention of 1 h and carries a store-clock deadAt.
            await store.deadLetter(c2.lease, 'rejected', err(1));
            const dl = await store.getDeadLetter(c2.id);
            expect(Math.abs(dl!.deadAt.getTime() - storeNow)).toBeLessThan(60_000);
            expect(Math.abs(dl!.errors[0].at.getTime() - storeNow)).toBeLessThan(60_000);
            const kept = await store.cleanup({
              deliveredRetentionMs: HOUR,
              deadLetterRetentionMs: HOUR,
              batchSize: 100,
            });
            expect(kept).toEqual({ events: 0, deadLetters: 0 });
            expect(await store.getDeadLetter(c2.id)).not.toBeNull();
          });
        });
      }
    });

    describe('stats and cleanup', () => {
      it('counts pending, due, leased and dead per type', async () => {
        await store.append([
          event({ type: 't.one' }),
          event({ type: 't.two', handlers: ['A.handle'] }),
        ]);
        let stats = await store.stats();
        expect(stats).toMatchObject({ pending: 3, due: 3, leased: 0, dead: 0 });
        expect(stats.byType['t.one']).toEqual({ pending: 2, leased: 0, dead: 0 });
        const claimed = await claim([A], 1);
        stats = await store.stats();
        expect(stats).toMatchObject({ pending: 2, leased: 1 });
        await store.deadLetter(claimed[0].lease, 'rejected', err(1));
        stats = await store.stats();
        expect(stats).toMatchObject({ pending: 2, leased: 0, dead: 1 });
        expect(stats.oldestPendingAgeMs).toBeGreaterThanOrEqual(0);
      });

      it('removes delivered events after their retention, in bounded batches', async () => {
        await store.append([
          event({ handlers: ['A.handle'] }),
          event({ handlers: ['A.handle'] }),
          event(),
        ]);
        await ackAll(await claim([A]));
        await advance(20);
        const first = await store.cleanup({
          deliveredRetentionMs: 0,
          deadLetterRetentionMs: null,
          batchSize: 1,
        });
        expect(first.events).toBe(1);
        const second = await store.cleanup({
          deliveredRetentionMs: 0,
          deadLetterRetentionMs: null,
          batchSize: 10,
        });
        // The third event still has B's delivery pending, so it stays.
        expect(second.events).toBe(1);
        expect((await store.stats()).pending).toBe(1);
        expect((await claim([B])).length).toBe(1);
        const kept = await store.cleanup({
          deliveredRetentionMs: 3_600_000,
          deadLetterRetentionMs: null,
          batchSize: 10,
        });
        expect(kept.events).toBe(0);
      });

      it('removes dead letters after their retention', async () => {
        await store.append([event({ handlers: ['A.handle'] })]);
        const [c] = await claim([A]);
        await store.deadLetter(c.lease, 'rejected', err(1));
        expect(
          (
            await store.cleanup({
              deliveredRetentionMs: 0,
              deadLetterRetentionMs: 3_600_000,
              batchSize: 10,
            })
          ).deadLetters,
        ).toBe(0);
        await advance(20);
        expect(
          (
            await store.cleanup({
              deliveredRetentionMs: 0,
              deadLetterRetentionMs: 0,
              batchSize: 10,
            })
          ).deadLetters,
        ).toBe(1);
        expect(await store.getDeadLetter(c.id)).toBeNull();
      });

      it('never loses a dead letter replayed while retention removes old dead letters', async () => {
        // A replay that answered 1 must leave a claimable delivery with its event, whatever a
        // concurrent retention run decided about the dead letter a moment before (README Guarantees 9).
        for (let i = 0; i < 30; i++) {
          const e = event({ payload: { i }, handlers: ['A.handle'] });
          await store.append([e]);
          const [c] = await claim([A], 100, 'w1', 60_000);
          await store.deadLetter(c.lease, 'rejected', err(1));
          await advance(5);
          const [replayed] = await Promise.all([
            store.replay({ ids: [c.id] }),
            store.cleanup({ deliveredRetentionMs: 0, deadLetterRetentionMs: 0, batchSize: 100 }),
          ]);
          if (replayed === 1) {
            // Another retention run right after must not touch the replayed delivery either.
            await store.cleanup({
              deliveredRetentionMs: 0,
              deadLetterRetentionMs: 0,
              batchSize: 100,
            });
            const again = await claim([A], 100, 'w1', 60_000);
            expect(again.map((x) => [x.id, x.event.id, x.event.payload])).toEqual([
              [c.id, e.id, { i }],
            ]);
            await store.ack(again[0].lease);
          } else {
            expect(replayed).toBe(0);
            expect(await store.getDeadLetter(c.id)).toBeNull();
            expect(await claim([A])).toHaveLength(0);
          }
        }
        // Which side wins each race depends on timing; every outcome above was checked.
        expect((await store.stats()).dead).toBe(0);
      }, 120_000);

      it('removes everything eligible over repeated small cleanup calls', async () => {
        const delivered = Array.from({ length: 25 }, (_, i) =>
          event({ payload: { i }, handlers: ['A.handle'] }),
        );
        const deadOnes = Array.from({ length: 5 }, (_, i) =>
          event({ type: 't.two', payload: { i }, handlers: ['A.handle'] }),
        );
        await store.append([...delivered, ...deadOnes]);
        // A lease that outlives 30 sequential outcomes on a loaded server.
        const claimed = await claim([A], 100, 'w1', 60_000);
        expect(claimed).toHaveLength(30);
        for (const c of claimed) {
          if (c.event.type === 't.two') await store.deadLetter(c.lease, 'rejected', err(1));
          else await store.ack(c.lease);
        }
        await advance(20);
        const totals = { events: 0, deadLetters: 0 };
        for (let call = 0; call < 40; call++) {
          const r = await store.cleanup({
            deliveredRetentionMs: 0,
            deadLetterRetentionMs: 0,
            batchSize: 4,
          });
          expect(r.events).toBeLessThanOrEqual(4);
          expect(r.deadLetters).toBeLessThanOrEqual(4);
          totals.events += r.events;
          totals.deadLetters += r.deadLetters;
          if (r.events === 0 && r.deadLetters === 0) break;
        }
        expect(totals.deadLetters).toBe(5);
        expect(totals.events).toBeGreaterThanOrEqual(25);
        expect(await store.stats()).toMatchObject({ pending: 0, leased: 0, dead: 0 });
        // Every event is gone: its id takes new content without a DuplicateEventError.
        for (const e of [...delivered, ...deadOnes])
          await store.append([{ ...e, payload: { other: true }, handlers: [] }]);
      });

      it('keeps an event while a delivery of it is open or dead-lettered', async () => {
        const dead = event({ payload: { n: 'dead' } });
        const open = event({ payload: { n: 'open' } });
        await store.append([dead, open]);
        const claimed = await claim([A, B], 100, 'w1', 60_000);
        expect(claimed).toHaveLength(4);
        const of = (e: AppendableEvent, h: HandlerSubscription) =>
          claimed.find((c) => c.event.id === e.id && c.handler === h.name)!;
        await store.ack(of(dead, A).lease);
        await store.deadLetter(of(dead, B).lease, 'rejected', err(1));
        await store.ack(of(open, A).lease);
        const leased = of(open, B);
        await advance(20);
        for (let call = 0; call < 5; call++) {
          await store.cleanup({
            deliveredRetentionMs: 0,
            deadLetterRetentionMs: null,
            batchSize: 1,
          });
        }
        // Both events are still there: new content under their ids is refused.
        for (const e of [dead, open]) {
          await expect(store.append([{ ...e, payload: { changed: true } }])).rejects.toBeInstanceOf(
            DuplicateEventError,
          );
        }
        expect((await store.getDeadLetter(of(dead, B).id))?.payload).toEqual({ n: 'dead' });
        await store.ack(leased.lease);
        expect(await store.replay({ ids: [of(dead, B).id] })).toBe(1);
        const again = await claim([A, B], 100, 'w1', 60_000);
        expect(again.map((c) => [c.handler, c.event.id, c.event.payload])).toEqual([
          ['B.handle', dead.id, { n: 'dead' }],
        ]);
      });
    });
  });
}
