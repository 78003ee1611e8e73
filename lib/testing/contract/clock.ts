import { beforeEach, describe, expect, it } from '@jest/globals';
import type { OutboxStore } from '../../interfaces/outbox-store.interface';
import { ContractKit, HOUR, withAppClock } from './kit';

/** The store clock: leases and retries follow it, not the application clock. */
export function storeClockContract(k: ContractKit): void {
  const { event, claim, err, A } = k;
  let store: OutboxStore;
  beforeEach(() => {
    store = k.store;
  });

  describe('store clock', () => {
    // docs/guarantees.md, Guarantees 5: due times, leases, retries and retention follow the store clock, so an
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
}
