import { randomUUID } from 'node:crypto';
import { beforeEach, describe, expect, it } from '@jest/globals';
import { LeaseLostError } from '../../errors/lease-lost.error';
import type { OutboxStore } from '../../interfaces/outbox-store.interface';
import { ContractKit } from './kit';

/** Leases and fencing: owners and tokens, expiry and re-claim, renew, release, ackMany. */
export function leasesAndFencingContract(k: ContractKit): void {
  const { event, claim, err, advance, A, leaseMs } = k;
  let store: OutboxStore;
  beforeEach(() => {
    store = k.store;
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
      const [old] = await claim([A], 10, 'w-old', leaseMs);
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
      const [old] = await claim([A], 10, 'w-old', leaseMs);
      await advance(leaseMs + 50);
      const [fresh] = await claim([A], 10, 'w-new');
      expect(await store.ackMany([old.lease])).toEqual([]);
      expect(await store.ackMany([fresh.lease])).toEqual([fresh.id]);
    });

    it('keeps a renewed lease past its first expiry', async () => {
      await store.append([event({ handlers: ['A.handle'] })]);
      const [c] = await claim([A], 10, 'w1', leaseMs);
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
  });
}
