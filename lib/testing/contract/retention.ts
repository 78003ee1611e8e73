import { beforeEach, describe, expect, it } from '@jest/globals';
import { DuplicateEventError } from '../../errors/duplicate-event.error';
import type {
  AppendableEvent,
  HandlerSubscription,
  OutboxStore,
} from '../../interfaces/outbox-store.interface';
import { ContractKit } from './kit';

/** Stats and retention: counts per type, cleanup of delivered events and dead letters. */
export function retentionContract(k: ContractKit): void {
  const { event, claim, err, ackAll, advance, A, B } = k;
  let store: OutboxStore;
  beforeEach(() => {
    store = k.store;
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
      // concurrent retention run decided about the dead letter a moment before (docs/guarantees.md, Guarantees 9).
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
}
