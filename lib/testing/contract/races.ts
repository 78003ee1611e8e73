import { beforeEach, describe, expect, it } from '@jest/globals';
import type { OutboxStore } from '../../interfaces/outbox-store.interface';
import { ContractKit } from './kit';

/** Real races between claimers on one store. */
export function racesContract(k: ContractKit): void {
  const { event, claim, A, options } = k;
  let store: OutboxStore;
  beforeEach(() => {
    store = k.store;
  });

  describe('races', () => {
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
}
