import { randomUUID } from 'node:crypto';
import { beforeEach, describe, expect, it } from '@jest/globals';
import type { DeadLetterFilter, OutboxStore } from '../../interfaces/outbox-store.interface';
import { ContractKit, sleep, inParallel } from './kit';

/** Replay and purge of dead letters: by id, list and filter, in batches, while workers fail them again. */
export function replayAndPurgeContract(k: ContractKit): void {
  const { event, claim, err, advance, A, B, makeDead } = k;
  let store: OutboxStore;
  beforeEach(() => {
    store = k.store;
  });

  describe('replay and purge', () => {
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
      const since = performance.now();
      const at = new Date((await store.now()).getTime() + k.aheadMs);
      expect(await store.replay({ ids: [deliveryId] }, at)).toBe(1);
      await k.notYet(since, async () => expect(await claim([A])).toHaveLength(0));
      await advance(k.aheadMs + 50);
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
  });
}
