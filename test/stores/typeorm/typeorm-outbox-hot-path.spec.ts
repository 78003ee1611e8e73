import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import { DuplicateEventError } from '../../../lib/errors/duplicate-event.error';
import { HandlerSubscription } from '../../../lib/interfaces/outbox-store.interface';
import { TypeOrmOutboxStore } from '../../../lib/stores/typeorm/internal';
import { describeWithService } from '../../support/services';
import {
  openUnpreparedPgStore,
  PlanNode,
  planNodes,
  SERVICE_OF,
  watchStatements,
} from './typeorm-test-helpers';

const A: HandlerSubscription = { name: 'A.handle', types: ['hot.event'] };
const HISTORY = 100_000;
const OPEN = 20;

describeWithService(SERVICE_OF.postgres, 'typeorm hot path', () => {
  let pg: Awaited<ReturnType<typeof openUnpreparedPgStore>>;
  let ds: DataSource;
  let h: typeof pg.h;
  let store: TypeOrmOutboxStore;

  beforeAll(async () => {
    pg = await openUnpreparedPgStore('hot');
    ({ ds, h, store } = pg);
  }, 60_000);
  afterAll(async () => pg?.close());

  it(`the claim visits open deliveries only, with ${HISTORY.toLocaleString()} delivered and dead events retained (after ANALYZE)`, async () => {
    const { events: E, deliveries: D, deadLetters: DL } = h.tables;
    // History as the store leaves it: delivered events stay in the events table only, dead
    // letters in theirs. Written set-based: appending 100k events one by one would take minutes.
    await ds.query(
      `INSERT INTO ${E.text} (id, type, event_key, payload, headers, occurred_at, available_at)
       SELECT gen_random_uuid(), 'hot.event', 'k' || (g % 50), '{}', '{}', now(), now() FROM generate_series(1, $1) g`,
      [HISTORY],
    );
    await ds.query(
      `INSERT INTO ${DL.text} (id, event_seq, event_type, event_key, handler, attempts, reason, errors, dead_at)
       SELECT gen_random_uuid(), seq, type, event_key, 'A.handle', 10, 'exhausted', '[]', now() FROM ${E.text} WHERE seq % 2 = 0`,
    );
    await store.append(
      Array.from({ length: OPEN }, (_, i) => ({
        id: randomUUID(),
        type: 'hot.event',
        key: `k${i % 5}`,
        payload: { i },
        headers: {},
        occurredAt: new Date(),
        availableAt: null,
        handlers: ['A.handle'],
      })),
    );
    await ds.query(`ANALYZE ${E.text}`);
    await ds.query(`ANALYZE ${D.text}`);
    await ds.query(`ANALYZE ${DL.text}`);

    // Record the claim statement as the store sends it, then EXPLAIN ANALYZE it in a transaction
    // that is rolled back.
    const sent: Array<{ text: string; params: unknown[] }> = [];
    const claimed = await watchStatements(
      ds,
      (text, params) => {
        if (/lease_token = /.test(text) && /SKIP LOCKED/.test(text)) sent.push({ text, params });
      },
      () => store.claim({ workerId: 'w', handlers: [A], limit: 10, leaseMs: 60_000 }),
    );
    expect(claimed).toHaveLength(5); // one per key: the first of each of 5 keys
    expect(sent).toHaveLength(1);
    const runner = ds.createQueryRunner();
    let plan: PlanNode;
    try {
      await runner.startTransaction();
      const [row] = await runner.query(
        `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${sent[0].text}`,
        sent[0].params,
      );
      plan = (row['QUERY PLAN'] as Array<{ Plan: PlanNode }>)[0].Plan;
    } finally {
      await runner.rollbackTransaction();
      await runner.release();
    }
    const all = planNodes(plan);
    const visited = (table: string) =>
      all
        .filter((n) => n['Relation Name'] === table)
        .reduce(
          (sum, n) =>
            sum +
            ((n['Actual Rows'] ?? 0) + (n['Rows Removed by Filter'] ?? 0)) *
              (n['Actual Loops'] ?? 1),
          0,
        );
    const name = (t: { text: string }) => t.text.replace(/"/g, '').split('.').pop()!;
    // Nothing of the history is read: the dead letters not at all, events only for the rows
    // claimed, deliveries only among the open ones (each candidate checks its key's elders).
    expect(visited(name(DL))).toBe(0);
    expect(visited(name(E))).toBeLessThanOrEqual(10);
    // (a few index probes per open row: the candidate itself and its key's elders; and once
    // more, up to max(5 × the limit, 500), for the bound past which the claim reads its keys' heads from
    // the key index instead: see `ClaimOp.keyHead`)
    expect(visited(name(D))).toBeLessThanOrEqual(OPEN * 9);
  }, 120_000);

  it("the ack reaches deliveries by primary key only, as a generic plan, with a young table's statistics", async () => {
    await h.empty();
    const { deliveries: D } = h.tables;
    const open = 5_000;
    for (let i = 0; i < open; i += 1000) {
      await store.append(
        Array.from({ length: 1000 }, (_, j) => ({
          id: randomUUID(),
          type: 'hot.event',
          key: null,
          payload: { i: i + j },
          headers: {},
          occurredAt: new Date(),
          availableAt: null,
          handlers: ['A.handle'],
        })),
      );
    }
    const claimed = await store.claim({
      workerId: 'w',
      handlers: [A],
      limit: 300,
      leaseMs: 60_000,
    });
    expect(claimed).toHaveLength(300);
    const sent: Array<{ text: string; params: unknown[] }> = [];
    // One lease refused: the right id with another worker's token.
    const leases = claimed.map((c) => c.lease);
    leases[7] = { ...leases[7], token: randomUUID() };
    const acked = await watchStatements(
      ds,
      (text, params) => {
        if (/DELETE FROM/.test(text) && /lease_token/.test(text)) sent.push({ text, params });
      },
      () => store.ackMany(leases.slice(0, 150)),
    );
    expect(acked).toHaveLength(149);
    expect(acked).not.toContain(leases[7].deliveryId);
    expect(sent).toHaveLength(1);
    // The plan the server reuses for a prepared statement after five executions: parameters
    // unknown to the planner (PostgreSQL 15 has no EXPLAIN (GENERIC_PLAN)).
    const literal = (value: unknown) =>
      Array.isArray(value)
        ? `'{${value.map((v) => `"${String(v).replace(/["\\]/g, '\\$&')}"`).join(',')}}'`
        : `'${String(value)}'`;
    const runner = ds.createQueryRunner();
    let plan: PlanNode;
    try {
      await runner.startTransaction();
      await runner.query(`SET LOCAL plan_cache_mode = force_generic_plan`);
      await runner.query(`PREPARE hot_ack AS ${sent[0].text}`);
      const [row] = await runner.query(
        `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE hot_ack(${sent[0].params.map(literal).join(', ')})`,
      );
      plan = (row['QUERY PLAN'] as Array<{ Plan: PlanNode }>)[0].Plan;
    } finally {
      await runner.rollbackTransaction();
      await runner.query('DEALLOCATE ALL');
      await runner.release();
    }
    const table = D.text.replace(/"/g, '').split('.').pop()!;
    const all = planNodes(plan) as Array<PlanNode & { 'Index Name'?: string }>;
    // Only the primary key is used, no other index and no sequential scan of the deliveries.
    expect([...new Set(all.map((n) => n['Index Name']).filter(Boolean))]).toEqual([
      `${table}_pkey`,
    ]);
    expect(all.filter((n) => n['Node Type'] === 'Seq Scan')).toEqual([]);
    // What is read of the deliveries is the 150 rows asked for (each id's index entries lead to
    // its row), not the 5,000 open ones.
    const read = all
      .filter((n) => n['Relation Name'] === table && n['Node Type'] !== 'Delete')
      .reduce((sum, n) => sum + (n['Actual Rows'] ?? 0) + (n['Rows Removed by Filter'] ?? 0), 0);
    expect(read).toBeLessThanOrEqual(150);
  }, 120_000);

  it.each(['READ COMMITTED', 'REPEATABLE READ'] as const)(
    'two concurrent appends of one id under %s: one writes, the other is a no-op or a retryable serialization error; different content is refused',
    async (isolation) => {
      await h.empty();
      const id = randomUUID();
      const event = {
        id,
        type: 'hot.event',
        key: null,
        payload: { same: true },
        headers: {},
        occurredAt: new Date('2026-01-01T00:00:00Z'),
        availableAt: null,
        handlers: ['A.handle'],
      };
      const first = ds.createQueryRunner();
      const second = ds.createQueryRunner();
      try {
        await first.startTransaction(isolation);
        await second.startTransaction(isolation);
        // Both take their snapshot before either inserts.
        await first.query('SELECT 1');
        await second.query('SELECT 1');
        await h.store.append([event], { manager: first.manager });
        const late = h.store.append([event], { manager: second.manager });
        await first.commitTransaction();
        const outcome = await late.then(
          () => 'no-op',
          (error: { driverError?: { code?: string } }) => error.driverError?.code ?? String(error),
        );
        if (isolation === 'READ COMMITTED') expect(outcome).toBe('no-op');
        // REPEATABLE READ cannot see the other row to compare it: PostgreSQL answers 40001,
        // and the caller's retry (as for any serialization failure) is a no-op.
        else expect(outcome).toBe('40001');
        if (second.isTransactionActive) await second.rollbackTransaction();
        await expect(h.store.append([event])).resolves.toHaveLength(1);
        await expect(
          h.store.append([{ ...event, payload: { same: false } }]),
        ).rejects.toBeInstanceOf(DuplicateEventError);
        const rows = await ds.query(`SELECT COUNT(*)::int AS n FROM ${h.tables.deliveries.text}`);
        expect(rows[0].n).toBe(1);
      } finally {
        for (const r of [first, second]) {
          if (r.isTransactionActive) await r.rollbackTransaction();
          await r.release();
        }
      }
    },
  );

  it('a batch with one conflicting id writes nothing of the batch inside the caller transaction', async () => {
    await h.empty();
    const base = {
      type: 'hot.event',
      key: null,
      headers: {},
      occurredAt: new Date('2026-01-01T00:00:00Z'),
      availableAt: null,
      handlers: ['A.handle'],
    };
    const taken = { ...base, id: randomUUID(), payload: { v: 1 } };
    await h.store.append([taken]);
    const runner = ds.createQueryRunner();
    try {
      await runner.startTransaction();
      await expect(
        h.store.append(
          [
            { ...base, id: randomUUID(), payload: { v: 2 } },
            { ...taken, payload: { v: 'other' } },
          ],
          { manager: runner.manager },
        ),
      ).rejects.toBeInstanceOf(DuplicateEventError);
      // The transaction is still usable and holds nothing of the refused batch.
      const [row] = await runner.query(`SELECT COUNT(*)::int AS n FROM ${h.tables.events.text}`);
      expect(row.n).toBe(1);
      await runner.commitTransaction();
    } finally {
      if (runner.isTransactionActive) await runner.rollbackTransaction();
      await runner.release();
    }
  });
});
