import { randomUUID } from 'node:crypto';
import { LeaseKeeper, KeptLease } from '../../lib/dispatcher/lease-keeper';
import { LeaseLostError } from '../../lib/errors/lease-lost.error';
import { Lease } from '../../lib/interfaces/outbox-store.interface';
import { MemoryOutboxStore } from '../../lib/stores/memory/memory-outbox.store';

const LEASE_MS = 300;

/** Claims `n` deliveries of a fresh memory store; the keeper's renewals are counted per delivery. */
async function setUp(n: number) {
  const store = new MemoryOutboxStore();
  await store.append(
    Array.from({ length: n }, (_, i) => ({
      id: randomUUID(),
      type: 'T',
      payload: { i },
      key: null,
      headers: {},
      occurredAt: new Date(),
      availableAt: null,
      handlers: ['h'],
    })),
  );
  const claimed = await store.claim({
    workerId: 'w',
    handlers: [{ name: 'h', types: ['T'] }],
    limit: n,
    leaseMs: LEASE_MS,
  });
  const renewals = new Map<string, number>();
  const renew = store.renew.bind(store);
  store.renew = (lease: Lease, ms: number) => {
    renewals.set(lease.deliveryId, (renewals.get(lease.deliveryId) ?? 0) + 1);
    return renew(lease, ms);
  };
  const keeper = new LeaseKeeper(store, LEASE_MS, () => undefined);
  const lost: string[] = [];
  const kept = claimed.map((c) => keeper.keep(c.lease, performance.now(), () => lost.push(c.id)));
  return { store, keeper, claimed, kept, renewals, lost };
}

const ticks = (n: number) => new Promise((r) => setTimeout(r, n * (LEASE_MS / 3) + 30));

describe('LeaseKeeper', () => {
  it('renews the leases it keeps, and none once released, whatever the order of release', async () => {
    const { keeper, claimed, kept, renewals, lost } = await setUp(6);
    // Released out of order: the first, one in the middle, the last.
    for (const i of [0, 3, 5]) keeper.release(kept[i]);
    keeper.release(kept[3]); // twice: nothing more happens
    await ticks(2);
    const renewed = claimed.map((c) => renewals.get(c.id) ?? 0);
    expect(renewed.filter((_, i) => [0, 3, 5].includes(i))).toEqual([0, 0, 0]);
    for (const i of [1, 2, 4]) expect(renewed[i]).toBeGreaterThan(0);
    // The renewed lease replaced the claimed one (a fresh deadline).
    expect(kept[1].lease.leaseUntil.getTime()).toBeGreaterThan(
      claimed[1].lease.leaseUntil.getTime(),
    );
    for (const i of [1, 2, 4]) keeper.release(kept[i]);
    const after = [...renewals.values()].reduce((a, b) => a + b, 0);
    await ticks(2);
    expect([...renewals.values()].reduce((a, b) => a + b, 0)).toBe(after);
    expect(lost).toEqual([]);
    keeper.stop();
  });

  it('stops the run of a lease the store refuses, and keeps renewing the others', async () => {
    const { store, keeper, claimed, kept, renewals, lost } = await setUp(4);
    // Acknowledged behind the keeper's back: the next renewal is refused.
    await store.ack(claimed[2].lease);
    await ticks(2);
    expect(lost).toEqual([claimed[2].id]);
    const before = claimed.map((c) => renewals.get(c.id) ?? 0);
    await ticks(1);
    const after = claimed.map((c) => renewals.get(c.id) ?? 0);
    expect(after[2]).toBe(before[2]);
    for (const i of [0, 1, 3]) expect(after[i]).toBeGreaterThan(before[i]);
    expect(lost).toEqual([claimed[2].id]);
    for (const k of kept) keeper.release(k);
    keeper.stop();
  });

  it('gives up on leases it cannot renew in time; one released by another loss is skipped', async () => {
    const clock = { now: 0 };
    const store = new MemoryOutboxStore();
    const keeper = new LeaseKeeper(
      store,
      LEASE_MS,
      () => undefined,
      () => clock.now,
    );
    const lost: string[] = [];
    const lease = (id: string): Lease => ({
      deliveryId: id,
      owner: 'w',
      token: 't',
      leaseUntil: new Date(),
    });
    const entries: KeptLease[] = [];
    for (const id of ['a', 'b', 'c']) {
      entries.push(
        keeper.keep(lease(id), 0, (error) => {
          expect(error).toBeInstanceOf(LeaseLostError);
          lost.push(id);
          // Losing `a` ends `b`'s run too (a batch): `b` leaves the keeper before its turn.
          if (id === 'a') keeper.release(entries[1]);
        }),
      );
    }
    // The local clock is past every deadline: no renewal would come back in time.
    clock.now = LEASE_MS;
    await ticks(1);
    expect(lost).toEqual(['a', 'c']);
    // Each at most once: none is kept any more.
    await ticks(1);
    expect(lost).toEqual(['a', 'c']);
    keeper.stop();
  });
});
