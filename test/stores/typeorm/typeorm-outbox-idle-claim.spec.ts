import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import { HandlerSubscription } from '../../../lib/interfaces/outbox-store.interface';
import { TypeOrmOutboxStore } from '../../../lib/stores/typeorm/internal';
import { describeWithService } from '../../support/services';
import {
  genericClaimPlan,
  openUnpreparedPgStore,
  PlanNode,
  SERVICE_OF,
  testEvent as event,
} from './typeorm-test-helpers';

/** Open deliveries of a handler the claiming worker does not have (another service's). */
const OTHER_OPEN = 20_000;

// bench/RESULTS.md run 19: the claim is a prepared statement; its generic plan once walked the
// unique (event_seq, handler) index with the worker's handler as a filter, reading every other
// handler's open deliveries on each claim of a worker whose own handlers had none.
describeWithService(SERVICE_OF.postgres, 'typeorm claim of an idle worker (PostgreSQL)', () => {
  let pg: Awaited<ReturnType<typeof openUnpreparedPgStore>>;
  let ds: DataSource;
  let h: typeof pg.h;
  let store: TypeOrmOutboxStore;

  beforeAll(async () => {
    pg = await openUnpreparedPgStore('idle');
    ({ ds, h, store } = pg);
    for (let i = 0; i < OTHER_OPEN; i += 1000) {
      await store.append(
        Array.from({ length: 1000 }, (_, j) =>
          event('other.event', `k${j % 200}`, ['Other.handle'], i + j),
        ),
      );
    }
    await ds.query(`VACUUM ANALYZE ${h.tables.deliveries.text}`);
  }, 120_000);
  afterAll(async () => pg?.close());

  /** The claim statement `handlers` send, EXPLAINed as the server's generic plan of it. */
  async function claimPlan(handlers: HandlerSubscription[]): Promise<PlanNode[]> {
    const { claimed, plan } = await genericClaimPlan(ds, store, handlers, 100, { buffers: true });
    expect(claimed).toEqual([]);
    return plan;
  }

  /** Blocks the candidate scan (alias `c` on the deliveries) read. */
  function candidateBlocks(all: PlanNode[]): number {
    const table = h.tables.deliveries.text.replace(/"/g, '').split('.').pop()!;
    const scans = all.filter(
      (n) => n['Relation Name'] === table && /^c(_\d+)?$/.test(n.Alias ?? ''),
    );
    expect(scans.length).toBeGreaterThan(0);
    return scans.reduce(
      (sum, n) => sum + (n['Shared Hit Blocks'] ?? 0) + (n['Shared Read Blocks'] ?? 0),
      0,
    );
  }

  it(`a worker whose handler has nothing open reads a few index blocks, not another handler's ${OTHER_OPEN.toLocaleString()} open deliveries`, async () => {
    const all = await claimPlan([{ name: 'Mine.handle', types: ['mine.event'] }]);
    // Its own (empty) part of the claim index: a descent, 2–3 blocks. Walking the other
    // handler's backlog in event_seq order read ~100 (the unique index's leaf pages).
    expect(candidateBlocks(all)).toBeLessThanOrEqual(10);
  }, 60_000);

  it('so does a worker with several handlers, none with anything open', async () => {
    const all = await claimPlan([
      { name: 'Mine.a', types: ['mine.event'] },
      { name: 'Mine.b', types: ['mine.event'] },
      { name: 'Mine.c', types: ['mine.other'] },
    ]);
    expect(candidateBlocks(all)).toBeLessThanOrEqual(3 * 10);
  }, 60_000);

  it("a worker with several handlers claims the oldest due deliveries across them, none behind another's backlog", async () => {
    // a's backlog first, then one event each of b and c: a limit of 3 still takes b's and c's
    // as soon as they are among the oldest; with a limit of 12 the oldest 12 across the three.
    const A = { name: 'Mine.a', types: ['mine.a'] };
    const B = { name: 'Mine.b', types: ['mine.b'] };
    const C = { name: 'Mine.c', types: ['mine.c'] };
    const batch = [
      ...Array.from({ length: 10 }, (_, i) => event('mine.a', null, [A.name], i)),
      event('mine.b', null, [B.name], 10),
      event('mine.c', 'k', [C.name], 11),
      ...Array.from({ length: 5 }, (_, i) => event('mine.a', null, [A.name], 12 + i)),
    ];
    await store.append(batch);
    const claimed = await store.claim({
      workerId: 'w',
      handlers: [A, B, C],
      limit: 12,
      leaseMs: 60_000,
    });
    expect(claimed.map((c) => (c.event.payload as { i: number }).i)).toEqual([
      0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
    ]);
    const rest = await store.claim({
      workerId: 'w',
      handlers: [A, B, C],
      limit: 12,
      leaseMs: 60_000,
    });
    expect(rest.map((c) => (c.event.payload as { i: number }).i)).toEqual([12, 13, 14, 15, 16]);
    await store.ackMany([...claimed, ...rest].map((c) => c.lease));
  }, 60_000);
});
