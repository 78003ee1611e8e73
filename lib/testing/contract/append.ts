import { beforeEach, describe, expect, it } from '@jest/globals';
import { DuplicateEventError } from '../../errors/duplicate-event.error';
import type { OutboxStore } from '../../interfaces/outbox-store.interface';
import { ContractKit } from './kit';

/** Appends: ids, payloads, idempotent re-appends, availableAt, onAppended. */
export function appendContract(k: ContractKit): void {
  const { event, claim, advance, A, B } = k;
  let store: OutboxStore;
  beforeEach(() => {
    store = k.store;
  });

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
      const since = performance.now();
      const now = await store.now();
      await store.append([
        event({ availableAt: new Date(now.getTime() + k.aheadMs), handlers: ['A.handle'] }),
      ]);
      await k.notYet(since, async () => expect(await claim([A])).toHaveLength(0));
      await advance(k.aheadMs + 50);
      expect(await claim([A])).toHaveLength(1);
    });
  });
}
