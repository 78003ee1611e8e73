import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import {
  AppendableEvent,
  ClaimedDelivery,
  HandlerSubscription,
  Lease,
} from '../../../lib/interfaces/outbox-store.interface';
import { describeWithService } from '../../support/services';
import {
  openDataSource,
  SERVICE_OF,
  storeFor,
  TestDialect,
  uniquePrefix,
} from './typeorm-test-helpers';

const H: HandlerSubscription = { name: 'H', types: ['x'] };
const cleanupNow = { deliveredRetentionMs: 0, deadLetterRetentionMs: null, batchSize: 5_000 };

function event(n: number): AppendableEvent {
  return {
    id: randomUUID(),
    type: 'x',
    payload: { n },
    key: null,
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers: [H.name],
  };
}

/** `ackMany` beyond the contract: chunking, mixed leases, and the exact row `ack` leaves. */
function ackManyOn(dialect: TestDialect): void {
  let ds: DataSource;
  let h: Awaited<ReturnType<typeof storeFor>>;

  beforeAll(async () => {
    ds = await openDataSource(dialect);
    h = await storeFor(ds, uniquePrefix(`am${dialect.slice(0, 2)}`));
  });
  afterAll(async () => {
    await h?.drop();
    await ds?.destroy();
  });
  beforeEach(() => h.empty());

  async function appendAndClaim(
    count: number,
    workerId = 'w1',
    leaseMs = 60_000,
  ): Promise<ClaimedDelivery[]> {
    const events = Array.from({ length: count }, (_, i) => event(i));
    for (let i = 0; i < events.length; i += 500) await h.store.append(events.slice(i, i + 500));
    const claimed: ClaimedDelivery[] = [];
    while (claimed.length < count) {
      const batch = await h.store.claim({ workerId, handlers: [H], limit: 500, leaseMs });
      if (batch.length === 0) break;
      claimed.push(...batch);
    }
    expect(claimed).toHaveLength(count);
    return claimed;
  }

  /** The columns `ack` touches, per delivery id. */
  async function rows(ids: string[]): Promise<Map<string, Record<string, unknown>>> {
    const D = h.tables.deliveries.text;
    const records = (await ds.query(
      `SELECT id, status, attempts, lease_owner, lease_token, lease_until, done_at, reason, errors FROM ${D}`,
    )) as Array<Record<string, unknown>>;
    const wanted = new Set(ids);
    return new Map(records.filter((r) => wanted.has(String(r.id))).map((r) => [String(r.id), r]));
  }

  it('acknowledges a batch of more than 1,000 leases (several statements), with forged ones mixed in', async () => {
    const claimed = await appendAndClaim(1_203);
    const forged: Lease[] = claimed
      .filter((_, i) => i % 97 === 0)
      .map((c) => ({ ...c.lease, token: randomUUID() }));
    const keep = new Set(forged.map((l) => l.deliveryId));
    const leases = [
      ...forged,
      ...claimed.filter((c) => !keep.has(c.id)).map((c) => c.lease),
      // The same lease twice is acknowledged once.
      ...claimed
        .filter((c) => !keep.has(c.id))
        .slice(0, 10)
        .map((c) => c.lease),
    ];
    const acked = await h.store.ackMany!(leases);
    expect(acked).toHaveLength(1_203 - keep.size);
    expect(new Set(acked)).toEqual(
      new Set(claimed.filter((c) => !keep.has(c.id)).map((c) => c.id)),
    );
    expect(await h.store.stats()).toMatchObject({ pending: 0, leased: keep.size });
    // The fenced-out ones are untouched and still acknowledged with their real lease.
    const rest = await h.store.ackMany!(claimed.filter((c) => keep.has(c.id)).map((c) => c.lease));
    expect(rest.sort()).toEqual([...keep].sort());
    expect(await h.store.stats()).toMatchObject({ pending: 0, leased: 0, dead: 0 });
  });

  it('acknowledges only owned, live leases out of a mixed batch and leaves the others unchanged', async () => {
    const [owned, wrongToken, wrongOwner, taken, lapsed, done] = await appendAndClaim(6, 'w1', 300);
    await h.store.ack(done.lease);
    await new Promise((resolve) => setTimeout(resolve, 400));
    // `taken` expired and another worker holds it now; `lapsed` expired and nobody took it.
    const [retaken] = await h.store.claim({
      workerId: 'w2',
      handlers: [H],
      limit: 1,
      leaseMs: 60_000,
    });
    expect(retaken.id).toBe(owned.id);
    const fresh = await h.store.claim({ workerId: 'w2', handlers: [H], limit: 3, leaseMs: 60_000 });
    expect(fresh.map((c) => c.id)).toEqual([wrongToken.id, wrongOwner.id, taken.id]);
    const [newOwned, newWrongToken, newWrongOwner] = [retaken, fresh[0], fresh[1]];
    const before = await rows([newWrongToken.id, newWrongOwner.id, taken.id, lapsed.id]);
    const acked = await h.store.ackMany!([
      newOwned.lease,
      { ...newWrongToken.lease, token: randomUUID() },
      { ...newWrongOwner.lease, owner: 'w3' },
      taken.lease,
      lapsed.lease,
      done.lease,
      { ...owned.lease, deliveryId: randomUUID() },
      { ...owned.lease, deliveryId: 'not-a-uuid' },
    ]);
    expect(acked).toEqual([owned.id]);
    expect(await rows([newWrongToken.id, newWrongOwner.id, taken.id, lapsed.id])).toEqual(before);
    expect((await rows([lapsed.id])).get(lapsed.id)).toMatchObject({
      status: 'leased',
      lease_owner: 'w1',
    });
  });

  it('acknowledges a delivery given twice in one batch, a stale lease first, by its live lease only', async () => {
    const [both, staleOnly, plain] = await appendAndClaim(3, 'w1', 300);
    await new Promise((resolve) => setTimeout(resolve, 400));
    const retaken = await h.store.claim({
      workerId: 'w2',
      handlers: [H],
      limit: 3,
      leaseMs: 60_000,
    });
    expect(retaken.map((c) => c.id)).toEqual([both.id, staleOnly.id, plain.id]);
    // The stale lease comes first for its id (PostgreSQL also gets it spelled in capitals: the
    // same row); the live one second. A delivery given only with its stale lease stays.
    const stale = (l: Lease) =>
      dialect === 'postgres' ? { ...l, deliveryId: l.deliveryId.toUpperCase() } : l;
    const acked = await h.store.ackMany!([
      stale(both.lease),
      retaken[0].lease,
      staleOnly.lease,
      { ...retaken[2].lease, token: randomUUID() },
      retaken[2].lease,
    ]);
    expect([...acked].sort()).toEqual([both.id, plain.id].sort());
    expect((await rows([staleOnly.id])).get(staleOnly.id)).toMatchObject({
      status: 'leased',
      lease_owner: 'w2',
    });
    expect(await h.store.ackMany!([retaken[1].lease])).toEqual([staleOnly.id]);
  });

  if (dialect === 'postgres') {
    it('never pairs a row with the lease of another delivery of its claim when ids in capitals sort out of uuid order', async () => {
      const first = await appendAndClaim(40, 'w1', 300);
      await new Promise((resolve) => setTimeout(resolve, 400));
      const live = await h.store.claim({
        workerId: 'w2',
        handlers: [H],
        limit: 40,
        leaseMs: 60_000,
      });
      const byId = new Map(live.map((c) => [c.id, c]));
      // Two deliveries of the new claim (one fence for both) whose ids, the larger one in
      // capitals, sort as text before the smaller one: the statement's id array is then out of
      // uuid order for them.
      const pair = first
        .flatMap((y) => first.map((x) => [y, x] as const))
        .find(([y, x]) => y.id > x.id && y.id.toUpperCase() < x.id);
      expect(pair).toBeDefined();
      const [y, x] = pair!;
      const acked = await h.store.ackMany!([
        { ...y.lease, deliveryId: y.id.toUpperCase() }, // stale: w1's lease
        byId.get(x.id)!.lease, // live
      ]);
      expect(acked).toEqual([x.id]);
      expect((await rows([y.id])).get(y.id)).toMatchObject({ status: 'leased', lease_owner: 'w2' });
    });
  }

  it('answers with each acknowledged id once, as the caller spelled it, whatever the order of the leases', async () => {
    const claimed = await appendAndClaim(5);
    // Out of id order (the statement wants them in it); on PostgreSQL an id in capitals still
    // names its row (a uuid column), and comes back as given.
    const leases = [...claimed].reverse().map((c) => c.lease);
    const spelled =
      dialect !== 'postgres'
        ? leases
        : leases.map((l, i) =>
            i % 2 === 0 ? { ...l, deliveryId: l.deliveryId.toUpperCase() } : l,
          );
    const acked = await h.store.ackMany!(spelled);
    expect([...acked].sort()).toEqual(spelled.map((l) => l.deliveryId).sort());
    expect(await h.store.stats()).toMatchObject({ pending: 0, leased: 0 });
  });

  it('removes a delivery from the open table exactly as ack does, so cleanup removes its event alike', async () => {
    const [one, two, open] = await appendAndClaim(3);
    await h.store.ack(one.lease);
    expect(await h.store.ackMany!([two.lease])).toEqual([two.id]);
    // Acknowledged deliveries leave the table the claim reads; the events stay for retention.
    expect(await rows([one.id, two.id, open.id])).toEqual(
      new Map([[open.id, expect.objectContaining({ status: 'leased' })]]),
    );
    const E = h.tables.events.text;
    expect(Number((await ds.query(`SELECT COUNT(*) AS n FROM ${E}`))[0].n)).toBe(3);
    await new Promise((resolve) => setTimeout(resolve, 5));
    // Both events go on the first cleanup; the one with an open delivery stays.
    expect(await h.store.cleanup(cleanupNow)).toEqual({ events: 2, deadLetters: 0 });
    expect(await h.store.cleanup(cleanupNow)).toEqual({ events: 0, deadLetters: 0 });
    expect(await h.store.ackMany!([open.lease])).toEqual([open.id]);
    expect(await h.store.cleanup(cleanupNow)).toEqual({ events: 1, deadLetters: 0 });
    expect(Number((await ds.query(`SELECT COUNT(*) AS n FROM ${E}`))[0].n)).toBe(0);
  });
}

describe('typeorm ackMany on sqlite', () => ackManyOn('sqlite'));
describeWithService(SERVICE_OF.postgres, 'typeorm ackMany', () => ackManyOn('postgres'));
describeWithService(SERVICE_OF.mariadb, 'typeorm ackMany', () => ackManyOn('mariadb'));
