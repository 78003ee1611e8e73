import { beforeEach, describe, expect, it } from '@jest/globals';
import type { OutboxStore } from '../../interfaces/outbox-store.interface';
import { ContractKit } from './kit';

/** Claims: types, fan-out per handler, limits, expansion; per-key order, including after replay. */
export function claimAndOrderContract(k: ContractKit): void {
  const { event, claim, err, ackAll, advance, A, B, leaseMs } = k;
  let store: OutboxStore;
  beforeEach(() => {
    store = k.store;
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
      const since = performance.now();
      await store.retry(first[0].lease, k.aheadMs, err(1));
      await k.notYet(since, async () => expect(await claim([A])).toHaveLength(0));
      await advance(k.aheadMs + 50);
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
      const [c2] = await claim([A], 100, 'w2', leaseMs);
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
}
