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

/**
 * README "Scaling out": 4 worker processes drain one backlog on one store. Every delivery runs;
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
        await dataSource.query(`DROP TABLE IF EXISTS "${prefix}${table}"`);
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

  it(`${WORKERS} worker processes drain ${EVENTS} events: each runs, duplicates only after a lost lease, order per key intact`, async () => {
    const result = await runScale({
      kind,
      prefix,
      dataSource,
      workers: WORKERS,
      events: EVENTS,
      keys: KEYS,
      timeoutMs: 50_000,
    });
    try {
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

      // Per key: n counts 0, 1, 2, … and the first run of n+1 starts after the first run of n ended.
      const firstRun = new Map<string, Run>();
      for (const runs of byId.values()) {
        const first = runs.reduce((a, b) => (a[4] <= b[4] ? a : b));
        firstRun.set(`${first[1]}#${first[2]}`, first);
      }
      let outOfOrder = 0;
      for (let k = 0; k < KEYS; k++) {
        for (let n = 1; n < EVENTS / KEYS; n++) {
          const before = firstRun.get(`k${k}#${n - 1}`)!;
          const after = firstRun.get(`k${k}#${n}`)!;
          if (after[4] < before[5]) outOfOrder++;
        }
      }
      expect(outOfOrder).toBe(0);

      const perWorker = result.stats.map((s) => s.succeeded);
      expect(perWorker.reduce((a, b) => a + b, 0)).toBe(result.runs.length);
      // All four took part (each claimed from the same backlog).
      for (const succeeded of perWorker) expect(succeeded).toBeGreaterThan(0);
      const storeStats = await result.store.stats();
      expect(storeStats).toMatchObject({ pending: 0, leased: 0, dead: 0 });
      console.log(
        `scale-out ${kind}: ${EVENTS} events, ${WORKERS} workers, ${Math.round(result.drainMs)} ms, ` +
          `per worker ${perWorker.join('/')}, duplicates ${duplicates.length}, lease losses ${leaseLost}`,
      );
    } finally {
      await result.close();
    }
  }, 90_000);
}

describeWithService('postgres', 'scale-out on PostgreSQL', () => scaleOut('postgres'));
describeWithService('redis', 'scale-out on Redis', () => scaleOut('redis'));
