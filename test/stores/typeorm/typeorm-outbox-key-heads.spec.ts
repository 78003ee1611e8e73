import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import { HandlerSubscription } from '../../../lib/interfaces/outbox-store.interface';
import { TypeOrmOutboxStore } from '../../../lib/stores/typeorm/internal';
import { describeWithService } from '../../support/services';
import {
  genericClaimPlan,
  openDataSource,
  openUnpreparedPgStore,
  PlanNode,
  SERVICE_OF,
  testEvent as event,
} from './typeorm-test-helpers';

const A: HandlerSubscription = { name: 'Keys.a', types: ['keys.event'] };
const B: HandlerSubscription = { name: 'Keys.b', types: ['keys.event'] };

/** `keys` keys × `perKey` events, appended round-robin (each key's events spread over the backlog). */
async function appendKeyed(
  store: TypeOrmOutboxStore,
  keys: number,
  perKey: number,
  handlers: string[],
  prefix = 'k',
): Promise<void> {
  const all = Array.from({ length: keys * perKey }, (_, i) =>
    event('keys.event', `${prefix}${i % keys}`, handlers, i),
  );
  for (let i = 0; i < all.length; i += 1000) await store.append(all.slice(i, i + 1000));
}

// bench/RESULTS.md runs 14 and 21: on a keyed backlog whose key heads all run, a claim walked the
// whole backlog probing the key index once per row for an older open delivery of its key (20,000
// open over 200 keys: 19,800 probes, 86–200 ms, no row). It probes at most max(5 × its limit,
// 500) due rows now and, past them, takes the keys' heads from the key index (up to 1,000 keys);
// these tests hold it to that, and check the order per key on the path past the bound (with one
// handler and with several, whose heads differ).
describeWithService(SERVICE_OF.postgres, 'typeorm claim of busy key heads (PostgreSQL)', () => {
  let pg: Awaited<ReturnType<typeof openUnpreparedPgStore>>;
  let ds: DataSource;
  let h: typeof pg.h;
  let store: TypeOrmOutboxStore;

  beforeAll(async () => {
    pg = await openUnpreparedPgStore('keyheads');
    ({ ds, h, store } = pg);
  }, 60_000);
  afterAll(async () => pg?.close());
  beforeEach(async () => h.empty());

  const D = () => h.tables.deliveries.text;

  /** Leases (for an hour, another worker's) each key's oldest open delivery of `handler`. */
  async function leaseHeads(handler: string, keys?: string[]): Promise<void> {
    await ds.query(
      `UPDATE ${D()} SET status = 'leased', attempts = attempts + 1, lease_owner = 'other', lease_token = 'other', lease_until = now() + interval '1 hour'
       WHERE (handler, event_key, event_seq) IN (SELECT handler, event_key, min(event_seq) FROM ${D()} WHERE handler = $1 AND event_key IS NOT NULL GROUP BY handler, event_key)
         AND ($2::text[] IS NULL OR event_key = ANY($2::text[]))`,
      [handler, keys ?? null],
    );
  }

  /** Acknowledges (deletes) the oldest `n` open deliveries of `handler`'s `key`. */
  async function ackOldest(handler: string, key: string, n: number): Promise<void> {
    await ds.query(
      `DELETE FROM ${D()} WHERE id IN (SELECT id FROM ${D()} WHERE handler = $1 AND event_key = $2 ORDER BY event_seq LIMIT $3)`,
      [handler, key, n],
    );
  }

  /**
   * The claim statement `handlers` send (sent for real: the tests leave nothing it could take, or
   * take the first `limit`), EXPLAINed as the server's generic plan of it, rolled back.
   */
  async function claimPlan(handlers: HandlerSubscription[], limit: number): Promise<PlanNode[]> {
    return (await genericClaimPlan(ds, store, handlers, limit)).plan;
  }

  /** How many times the claim probed the key index for an older open delivery (alias `p`). */
  const probes = (plan: PlanNode[]) =>
    plan.filter((n) => n.Alias === 'p').reduce((sum, n) => sum + (n['Actual Loops'] ?? 0), 0);
  /** Whether the claim read the keys' heads (the recursive walk of the key index). */
  const readHeads = (plan: PlanNode[]) =>
    plan.some((n) => n['Node Type'] === 'Recursive Union' && (n['Actual Loops'] ?? 0) > 0);

  it('a claim whose key heads all run probes at most max(5 × its limit, 500) rows, not the whole backlog', async () => {
    await appendKeyed(store, 200, 30, [A.name]);
    await leaseHeads(A.name);
    await ds.query(`VACUUM ANALYZE ${D()}`);
    const plan = await claimPlan([A], 100);
    // Before: 5,800 probes (every row but the 200 leased heads).
    expect(probes(plan)).toBeLessThanOrEqual(5 * 100 + 1);
    expect(readHeads(plan)).toBe(true);
    expect(
      await store.claim({ workerId: 'w', handlers: [A], limit: 100, leaseMs: 60_000 }),
    ).toEqual([]);
  }, 120_000);

  it('a claim of free heads over many keys stops within the bound and never reads the keys', async () => {
    await appendKeyed(store, 2_000, 1, [A.name]);
    await ds.query(`VACUUM ANALYZE ${D()}`);
    const plan = await claimPlan([A], 100);
    expect(probes(plan)).toBe(100);
    expect(readHeads(plan)).toBe(false);
  }, 120_000);

  it('past the bound, a handler with more than 1,000 keys open counts 1,001 of them and probes on', async () => {
    // 3 keys × 200 whose heads run (597 due non-heads: past the bound), then 1,200 keys of one
    // event each (free heads).
    await appendKeyed(store, 3, 200, [A.name], 'f');
    await leaseHeads(A.name);
    await appendKeyed(store, 1_200, 1, [A.name]);
    await ds.query(`VACUUM ANALYZE ${D()}`);
    const plan = await claimPlan([A], 100);
    const read = plan
      .filter((n) => n['Node Type'] === 'Recursive Union')
      .reduce((sum, n) => sum + (n['Actual Rows'] ?? 0), 0);
    expect(read).toBe(1_001);
    expect(probes(plan)).toBeGreaterThan(597);
    const claimed = await store.claim({
      workerId: 'w',
      handlers: [A],
      limit: 100,
      leaseMs: 60_000,
    });
    expect(claimed).toHaveLength(100);
    expect(new Set(claimed.map((c) => c.event.key)).size).toBe(100);
    expect(claimed.every((c) => /^k\d+$/.test(c.event.key ?? ''))).toBe(true);
  }, 120_000);

  describe.each([
    ['custom plans', {}],
    ['the generic plan', { options: '-c plan_cache_mode=force_generic_plan' }],
  ])('order per key past the bound (%s)', (_, extra) => {
    let ds2: DataSource;
    let s: TypeOrmOutboxStore;
    beforeAll(async () => {
      ds2 = await openDataSource('postgres', extra);
      s = new TypeOrmOutboxStore(ds2, { tablePrefix: h.tables.prefix });
    });
    afterAll(async () => ds2?.destroy());

    /**
     * 600 events of 3 keys whose heads run, first: 597 due deliveries that are no key's head in
     * front of each handler's backlog, so what follows lies past the bound (500 due deliveries
     * at these limits) and is decided by the keys' heads read from the key index.
     */
    async function filler(handlers: HandlerSubscription[]): Promise<void> {
      await appendKeyed(
        store,
        3,
        200,
        handlers.map((x) => x.name),
        'f',
      );
      for (const x of handlers) await leaseHeads(x.name, ['f0', 'f1', 'f2']);
    }

    const claim = async (handlers: HandlerSubscription[], limit: number) =>
      (await s.claim({ workerId: 'w', handlers, limit, leaseMs: 60_000 })).map(
        (c) => `${c.handler}:${c.event.key}:${(c.event.payload as { i: number }).i}`,
      );

    it('one handler: only heads, and the next of a key once its head is gone', async () => {
      // Past the filler, 3 keys × 20: k0's and k1's heads run, k2's head is its 10th event.
      await filler([A]);
      await appendKeyed(store, 3, 20, [A.name]);
      await leaseHeads(A.name, ['k0', 'k1']);
      await ackOldest(A.name, 'k2', 9);
      expect(await claim([A], 2)).toEqual(['Keys.a:k2:29']);
      expect(await claim([A], 2)).toEqual([]);
      await ackOldest(A.name, 'k1', 1);
      expect(await claim([A], 2)).toEqual(['Keys.a:k1:4']);
      expect(await claim([A], 2)).toEqual([]);
    }, 60_000);

    it("several handlers: each handler's own heads (the same events, other heads)", async () => {
      // Every event goes to both handlers. a: k0's and k1's heads run, k2's head is its 10th
      // event. b: every head runs — b's 10th event of k2 is not b's head, though it is a's.
      await filler([A, B]);
      await appendKeyed(store, 3, 20, [A.name, B.name]);
      await leaseHeads(A.name, ['k0', 'k1']);
      await ackOldest(A.name, 'k2', 9);
      await leaseHeads(B.name);
      expect(await claim([A, B], 2)).toEqual(['Keys.a:k2:29']);
      expect(await claim([B, A], 2)).toEqual([]);
      // b's k2 head done: b's next of k2 (its 2nd event) is b's head now, a's k2 runs.
      await ackOldest(B.name, 'k2', 1);
      expect(await claim([A, B], 2)).toEqual(['Keys.b:k2:5']);
    }, 60_000);

    it('a replayed dead letter past the bound still waits for the running delivery of its key', async () => {
      // Past the filler, k2's 3 events: its 1st a replayed dead letter not claimed since
      // (pending, lease_until set), its 2nd running (claimed while the 1st was dead).
      await filler([A]);
      await store.append(
        Array.from({ length: 3 }, (_, i) => event('keys.event', 'k2', [A.name], 20 + i)),
      );
      const k2 = (await ds.query(
        `SELECT event_seq FROM ${D()} WHERE handler = $1 AND event_key = 'k2' ORDER BY event_seq`,
        [A.name],
      )) as Array<{ event_seq: string }>;
      await ds.query(
        `UPDATE ${D()} SET lease_until = now() - interval '1 minute' WHERE handler = $1 AND event_seq = $2`,
        [A.name, k2[0].event_seq],
      );
      await ds.query(
        `UPDATE ${D()} SET status = 'leased', attempts = 1, lease_owner = 'other', lease_token = 'other', lease_until = now() + interval '1 hour' WHERE handler = $1 AND event_seq = $2`,
        [A.name, k2[1].event_seq],
      );
      expect(await claim([A], 1)).toEqual([]);
      // The running one done: the replayed one is k2's to run, then nothing (the 3rd waits).
      await ds.query(`DELETE FROM ${D()} WHERE handler = $1 AND event_seq = $2`, [
        A.name,
        k2[1].event_seq,
      ]);
      expect(await claim([A], 1)).toEqual(['Keys.a:k2:20']);
      expect(await claim([A], 1)).toEqual([]);
    }, 60_000);
  });
});
