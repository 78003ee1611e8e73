import Redis from 'ioredis';
import { randomBytes } from 'node:crypto';
import { DataSource } from 'typeorm';
import { describeWithService, SERVICES } from '../support/services';
import { dataSourceOptions, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';
import { Run } from './fixtures/scale-worker';
import { runScale, ScaleStoreKind } from './scale-driver';

const WORKERS = 4;
const EVENTS = 20_000;
const KEYS = 200;
const FROZEN_KEYS = 2_000;

/**
 * docs/relay-and-scaling.md "Scaling out": 4 worker processes drain one backlog on one store. Every delivery runs;
 * a second run of an event is allowed only after a lease was lost (counted by the workers), and
 * then only as a later attempt; per key, event n+1 starts only after event n's run ended.
 */
function scaleOut(kind: ScaleStoreKind): void {
  let dataSource: DataSource | null = null;
  let prefix: string;

  beforeAll(async () => {
    prefix =
      kind === 'postgres' ? uniquePrefix('scale') : `scale-${randomBytes(4).toString('hex')}`;
    if (kind === 'postgres')
      dataSource = await new DataSource(dataSourceOptions('postgres')).initialize();
  });

  afterAll(async () => {
    if (dataSource) {
      for (const table of [
        'outbox_deliveries',
        'outbox_dead_letters',
        'outbox_events',
        'outbox_schema_version',
      ])
        for (const p of [prefix, `${prefix}p`])
          await dataSource.query(`DROP TABLE IF EXISTS "${p}${table}"`);
      await dataSource.destroy();
    } else {
      const redis = new Redis(SERVICES.redis.port, SERVICES.redis.host);
      let cursor = '0';
      do {
        const [next, keys] = await redis.scan(cursor, 'MATCH', `*${prefix}*`, 'COUNT', 1000);
        if (keys.length) await redis.del(...keys);
        cursor = next;
      } while (cursor !== '0');
      await redis.quit();
    }
  });

  /** The checks both tests make; returns the number of events that ran twice or more. */
  function check(result: Awaited<ReturnType<typeof runScale>>, keys: number) {
    const byId = new Map<string, Run[]>();
    for (const run of result.runs) byId.set(run[0], [...(byId.get(run[0]) ?? []), run]);
    expect(byId.size).toBe(EVENTS);

    const duplicates = [...byId.values()].filter((runs) => runs.length > 1);
    const leaseLost = result.stats.reduce((sum, s) => sum + s.leaseLost, 0);
    // A second run is a redelivery after an expired lease: a later attempt, and counted.
    expect(duplicates.length).toBeLessThanOrEqual(leaseLost);
    for (const runs of duplicates) {
      const attempts = runs.map((r) => r[3]);
      expect(new Set(attempts).size).toBe(attempts.length);
    }
    // Fencing: whatever ran twice, each delivery was acknowledged exactly once.
    const perWorker = result.stats.map((s) => s.succeeded);
    expect(perWorker.reduce((a, b) => a + b, 0)).toBe(EVENTS);

    // Per key, n counts 0, 1, 2, …; n+1 first starts after a run of n ended (the one acknowledged
    // ended first: a stale run of a lost lease may end later). A run's end is taken before its
    // handler returns, so before its ack is sent, and a start after the claim that leased it:
    // on the one clock of the host (hostNow), the store's order (no claim of n+1 before n's ack)
    // puts n's end before n+1's start, with no margin needed.
    const byKey = new Map<string, Run[]>();
    for (const runs of byId.values()) byKey.set(`${runs[0][1]}#${runs[0][2]}`, runs);
    const outOfOrder: string[] = [];
    for (let k = 0; k < keys; k++) {
      for (let n = 1; n < EVENTS / keys; n++) {
        const before = byKey.get(`k${k}#${n - 1}`)!;
        const after = byKey.get(`k${k}#${n}`)!;
        const gapMs = Math.min(...after.map((r) => r[4])) - Math.min(...before.map((r) => r[5]));
        if (gapMs < 0) outOfOrder.push(describePair(`k${k}`, n, before, after, gapMs, result));
      }
    }
    // Each offending pair: both events' runs (attempt, worker, start and end since 'go'), and by
    // how much n+1's first start preceded n's first end.
    expect(
      outOfOrder.length ? [`${outOfOrder.length} pairs`, ...outOfOrder.slice(0, 20)] : [],
    ).toEqual([]);
    return { duplicates: duplicates.length, leaseLost, perWorker };
  }

  it(`${WORKERS} worker processes drain ${EVENTS} events: each runs, duplicates only after a lost lease, order per key intact`, async () => {
    const result = await runScale({
      kind,
      prefix,
      dataSource,
      workers: WORKERS,
      events: EVENTS,
      keys: KEYS,
      // 100 events per key run one after another, so the drain is about 100 claim rounds, not
      // 20,000 / concurrency: 45–55 s on this two-core machine with the server shared (it passed
      // its former 50 s bound by a few seconds when idle, and missed it under load).
      timeoutMs: 100_000,
    });
    try {
      const { duplicates, leaseLost, perWorker } = check(result, KEYS);
      // Several took part at once (all four start on the same backlog; on a fast store and two
      // busy cores, one that is scheduled late may find it drained, so not all four are required).
      expect(perWorker.filter((succeeded) => succeeded > 0).length).toBeGreaterThanOrEqual(2);
      expect(await result.store.stats()).toMatchObject({ pending: 0, leased: 0, dead: 0 });
      console.log(
        `scale-out ${kind}: ${EVENTS} events, ${WORKERS} workers, ${Math.round(result.drainMs)} ms, ` +
          `per worker ${perWorker.join('/')}, duplicates ${duplicates}, lease losses ${leaseLost}`,
      );
    } finally {
      await result.close();
    }
  }, 140_000);

  it('a worker frozen past its leases (SIGSTOP, then SIGCONT): its losses are counted, every second run is a later attempt after a lost lease, each delivery is acknowledged once, order per key intact', async () => {
    const result = await runScale({
      kind,
      prefix: `${prefix}p`,
      dataSource,
      workers: WORKERS,
      events: EVENTS,
      // More keys than the workers claim at once, so the frozen one surely holds some.
      keys: FROZEN_KEYS,
      timeoutMs: 60_000,
      leaseMs: 2_000,
      pause: { afterRuns: EVENTS / 4, ms: 4_000 },
    });
    try {
      const { duplicates, leaseLost, perWorker } = check(result, FROZEN_KEYS);
      expect(result.stats[result.pausedWorker!].leaseLost).toBeGreaterThan(0);
      expect(await result.store.stats()).toMatchObject({ pending: 0, leased: 0, dead: 0 });
      console.log(
        `scale-out ${kind} with a frozen worker: ${Math.round(result.drainMs)} ms, ` +
          `per worker ${perWorker.join('/')}, duplicates ${duplicates}, lease losses ${leaseLost}`,
      );
    } finally {
      await result.close();
    }
  }, 100_000);
}

/** One out-of-order pair of the per-key check, for the failure message. */
function describePair(
  key: string,
  n: number,
  before: Run[],
  after: Run[],
  gapMs: number,
  result: { startedAt: number },
): string {
  const at = (ms: number) => `+${(ms - result.startedAt).toFixed(3)}`;
  const runs = (list: Run[]) =>
    list.map((r) => `attempt ${r[3]} on ${r[6]} ${at(r[4])}..${at(r[5])} ms`).join(', ');
  return (
    `${key}: #${n} started ${(-gapMs).toFixed(3)} ms before #${n - 1} ended; ` +
    `#${n - 1}: ${runs(before)}; #${n}: ${runs(after)}`
  );
}

describeWithService('postgres', 'scale-out on PostgreSQL', () => scaleOut('postgres'));
describeWithService('redis', 'scale-out on Redis', () => scaleOut('redis'));
