import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import {
  AppendableEvent,
  ClaimedDelivery,
  HandlerSubscription,
} from '../../../lib/interfaces/outbox-store.interface';
import { TypeOrmOutboxStore } from '../../../lib/stores/typeorm/internal';
import { describeWithService } from '../../support/services';
import { openDataSource, SERVICE_OF, storeFor, uniquePrefix } from './typeorm-test-helpers';

const A: HandlerSubscription = { name: 'Fan.a', types: ['fan.x', 'only.a'] };
const B: HandlerSubscription = { name: 'Fan.b', types: ['fan.x', 'only.b'] };
const C: HandlerSubscription = { name: 'Fan.c', types: ['fan.x'] };
const ALL = [A, B, C];

/** Deterministic pseudo-random numbers in [0, 1) (mulberry32), so a failure can be replayed. */
function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function event(i: number, key: string | null, handlers: HandlerSubscription[]): AppendableEvent {
  return {
    id: randomUUID(),
    type:
      handlers.length === 1 && handlers[0] !== C ? `only.${handlers[0].name.slice(-1)}` : 'fan.x',
    key,
    payload: { i },
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers: handlers.map((h) => h.name),
  };
}

// bench/RESULTS.md run 20: on PostgreSQL a worker with several handlers first checks a share of
// the limit per handler (sized from its last claim), and takes more from the handlers that
// filled theirs in the same statement only when those could still be among the oldest. That is a
// cost, never a result: the claim must return what checking `limit` candidates of every handler
// returned — the oldest due deliveries across the handlers, the head of each (handler, key) only.
describeWithService(
  SERVICE_OF.postgres,
  'typeorm claim of a worker with several handlers (PostgreSQL)',
  () => {
    let ds: DataSource;
    let h: Awaited<ReturnType<typeof storeFor>>;

    beforeAll(async () => {
      ds = await openDataSource('postgres');
      h = await storeFor(ds, uniquePrefix('fan'));
    }, 60_000);
    afterAll(async () => {
      await h?.drop();
      await ds?.destroy();
    });

    /** What the claim should lease now: the oldest claimable across `handlers`, by (event, handler). */
    async function oldest(handlers: HandlerSubscription[], limit: number): Promise<string[]> {
      const D = h.tables.deliveries.text;
      const rows: Array<{ id: string }> = await ds.query(
        `SELECT c.id FROM ${D} c
         WHERE c.handler = ANY($1)
           AND ((c.status = 'pending' AND c.available_at <= now()) OR (c.status = 'leased' AND c.lease_until <= now()))
           AND (c.event_key IS NULL OR NOT EXISTS (
             SELECT 1 FROM ${D} p WHERE p.handler = c.handler AND p.event_key = c.event_key
               AND p.status IN ('pending', 'leased') AND p.event_seq < c.event_seq))
         ORDER BY c.event_seq, c.handler LIMIT $2`,
        [handlers.map((x) => x.name), limit],
      );
      return rows.map((r) => String(r.id));
    }

    it('claims exactly the oldest due deliveries across the handlers while their shares shift', async () => {
      const store = new TypeOrmOutboxStore(ds, { tablePrefix: h.tables.prefix });
      const next = random(20);
      const limits = [1, 3, 7, 20, 50, 100];
      let held: ClaimedDelivery[] = [];
      let i = 0;
      let short = 0;
      for (let round = 0; round < 80; round++) {
        // The mix moves every 20 rounds: A's backlog, then C's, then fan-out, then B's alone, so
        // a handler's share of a claim keeps outgrowing (or falling below) its last one.
        const phase = Math.floor(round / 20);
        const events: AppendableEvent[] = [];
        const count = Math.floor(next() * 90);
        for (let j = 0; j < count; j++) {
          const r = next();
          const handlers =
            phase === 0
              ? r < 0.8
                ? [A]
                : ALL
              : phase === 1
                ? r < 0.7
                  ? [C]
                  : r < 0.8
                    ? [B]
                    : [A]
                : phase === 2
                  ? ALL
                  : [B];
          const key = next() < 0.3 ? null : `k${Math.floor(next() * 15)}`;
          events.push(event(i++, key, handlers));
        }
        if (events.length > 0) await store.append(events);
        const limit = limits[Math.floor(next() * limits.length)];
        const expected = await oldest(ALL, limit);
        const claimed = await store.claim({ workerId: 'w', handlers: ALL, limit, leaseMs: 60_000 });
        expect({ round, limit, ids: claimed.map((c) => c.id) }).toEqual({
          round,
          limit,
          ids: expected,
        });
        if (claimed.length < limit) short++;
        // Most finish now; the others hold their keys for a few rounds.
        held = [...held, ...claimed];
        const done = held.filter(() => next() < 0.6);
        held = held.filter((c) => !done.includes(c));
        if (done.length > 0) await store.ackMany(done.map((c) => c.lease));
      }
      await store.ackMany(held.map((c) => c.lease));
      // Both kinds of claim were compared: full ones and ones that found fewer than the limit.
      expect(short).toBeGreaterThan(0);
      expect(short).toBeLessThan(80);
    }, 120_000);

    it("skips a replayed dead letter while another claim holds its key's later delivery, also among a handler's further candidates", async () => {
      await h.empty();
      const store = new TypeOrmOutboxStore(ds, { tablePrefix: h.tables.prefix });
      const D = h.tables.deliveries.text;
      // A's backlog: 8 unkeyed events, then two of key K. The several-handler claim below checks
      // fewer than 8 of A's first (a share of the limit of 10), so the key's events come up among
      // the further candidates of the same statement.
      await store.append(Array.from({ length: 8 }, (_, i) => event(i, null, [A])));
      await store.append([event(8, 'K', [A]), event(9, 'K', [A])]);
      const first = await store.claim({
        workerId: 'w0',
        handlers: [A],
        limit: 100,
        leaseMs: 60_000,
      });
      expect(first.map((c) => (c.event.payload as { i: number }).i)).toEqual([
        0, 1, 2, 3, 4, 5, 6, 7, 8,
      ]);
      const unkeyed = first.slice(0, 8);
      for (const c of unkeyed) await store.release(c.lease);
      const deadId = first[8].id;
      await store.deadLetter(first[8].lease, 'rejected', {
        name: 'Error',
        message: 'failed',
        attempt: 1,
        workerId: 'w0',
      });
      const [{ id: later }] = await ds.query(
        `SELECT id FROM ${D} WHERE event_key = 'K' AND status = 'pending'`,
      );
      // A claim that has leased the later delivery and not committed yet.
      const other = ds.createQueryRunner();
      await other.connect();
      await other.startTransaction();
      let open = true;
      try {
        await other.query(
          `UPDATE ${D} SET status = 'leased', attempts = attempts + 1, lease_owner = 'w1', lease_token = 't1', lease_until = now() + interval '60 seconds' WHERE id = $1`,
          [later],
        );
        expect(await store.replay({ ids: [deadId] })).toBe(1);
        const claimer = new TypeOrmOutboxStore(ds, { tablePrefix: h.tables.prefix });
        const claimed = await claimer.claim({
          workerId: 'w2',
          handlers: ALL,
          limit: 10,
          leaseMs: 60_000,
        });
        await other.commitTransaction();
        open = false;
        // The unkeyed ones only: the replayed one waits for the later delivery, which runs.
        expect(claimed.map((c) => c.id)).toEqual(unkeyed.map((c) => c.id));
        await claimer.ackMany(claimed.map((c) => c.lease));
        const [{ n }] = await ds.query(
          `SELECT count(*)::int AS n FROM ${D} WHERE event_key = 'K' AND status = 'leased' AND lease_until > now()`,
        );
        expect(n).toBe(1);
        const [row] = await ds.query(`SELECT lease_until FROM ${D} WHERE id = $1`, [later]);
        await store.ack({
          deliveryId: String(later),
          owner: 'w1',
          token: 't1',
          leaseUntil: new Date(row.lease_until),
        });
        const next = await claimer.claim({
          workerId: 'w2',
          handlers: ALL,
          limit: 10,
          leaseMs: 60_000,
        });
        expect(next.map((c) => [c.handler, (c.event.payload as { i: number }).i])).toEqual([
          [A.name, 8],
        ]);
        await claimer.ackMany(next.map((c) => c.lease));
      } finally {
        if (open) await other.rollbackTransaction();
        await other.release();
      }
    }, 60_000);

    it('concurrent claims of several handlers never share a row or a (handler, key), and drain everything once, keys in order', async () => {
      const CLAIMERS = 4;
      const EVENTS = 1_500;
      const sources: DataSource[] = [];
      for (let w = 0; w < CLAIMERS; w++) sources.push(await openDataSource('postgres', { max: 2 }));
      try {
        await h.empty();
        const store = new TypeOrmOutboxStore(ds, { tablePrefix: h.tables.prefix });
        const events = Array.from({ length: EVENTS }, (_, i) =>
          // Mostly fan-out, some of A alone; a third unkeyed, the rest over 12 keys.
          event(i, i % 3 === 0 ? null : `k${i % 12}`, i % 5 === 0 ? [A] : ALL),
        );
        for (let i = 0; i < EVENTS; i += 500) await store.append(events.slice(i, i + 500));
        const total = events.reduce((n, e) => n + e.handlers!.length, 0);

        const held = new Set<string>();
        const heldKeys = new Set<string>();
        const handled = new Map<string, number>();
        const orderByKey = new Map<string, number[]>();
        let doubleLeases = 0;
        let doubleKeys = 0;
        const deadline = Date.now() + 60_000;
        const claimer = async (w: number) => {
          // A store (and so a claim history) per claimer, each on its own pool.
          const mine = new TypeOrmOutboxStore(sources[w], { tablePrefix: h.tables.prefix });
          let idle = 0;
          while (handled.size < total && Date.now() < deadline && idle < 100) {
            const batch = await mine.claim({
              workerId: `w${w}`,
              handlers: ALL,
              limit: [5, 30, 60][w % 3],
              leaseMs: 60_000,
            });
            if (batch.length === 0) {
              idle++;
              await new Promise((resolve) => setTimeout(resolve, 5));
              continue;
            }
            idle = 0;
            for (const c of batch) {
              if (held.has(c.id)) doubleLeases++;
              held.add(c.id);
              if (c.event.key !== null) {
                const k = `${c.handler}|${c.event.key}`;
                if (heldKeys.has(k)) doubleKeys++;
                heldKeys.add(k);
              }
            }
            // Let the other claimers run while these are held.
            await new Promise((resolve) => setTimeout(resolve, 1));
            for (const c of batch) {
              if (c.event.key !== null) {
                const k = `${c.handler}|${c.event.key}`;
                const seen = orderByKey.get(k) ?? [];
                seen.push((c.event.payload as { i: number }).i);
                orderByKey.set(k, seen);
                // Released before the ack makes the next of the key claimable.
                heldKeys.delete(k);
              }
              held.delete(c.id);
              handled.set(c.id, (handled.get(c.id) ?? 0) + 1);
            }
            await mine.ackMany(batch.map((c) => c.lease));
          }
        };
        await Promise.all(Array.from({ length: CLAIMERS }, (_, w) => claimer(w)));

        expect(doubleLeases).toBe(0);
        expect(doubleKeys).toBe(0);
        expect(handled.size).toBe(total);
        expect([...handled.values()].every((n) => n === 1)).toBe(true);
        for (const seen of orderByKey.values())
          expect(seen).toEqual([...seen].sort((a, b) => a - b));
        expect(await store.stats()).toMatchObject({ pending: 0, leased: 0 });
      } finally {
        await Promise.all(sources.map((s) => s.destroy()));
      }
    }, 90_000);
  },
);
