import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import { describeWithService } from '../../support/services';
import {
  openDataSource,
  SERVICE_OF,
  storeFor,
  TestDialect,
  uniquePrefix,
} from './typeorm-test-helpers';

const DEAD = 40_000;

/**
 * Writes `count` events of `type`, each with one dead letter of handler A.handle, set-based:
 * dead-lettering 40,000 deliveries through the store would take minutes.
 */
async function fillDeadLetters(
  ds: DataSource,
  dialect: 'postgres' | 'sqlite',
  tables: Awaited<ReturnType<typeof storeFor>>['tables'],
  type: string,
  count: number,
): Promise<void> {
  const { events: E, deadLetters: DL } = tables;
  if (dialect === 'postgres') {
    await ds.query(
      `INSERT INTO ${E.text} (id, type, event_key, payload, headers, occurred_at, available_at)
       SELECT gen_random_uuid(), $2, 'k' || (g % 50), '{}', '{}', now(), now() FROM generate_series(1, $1) g`,
      [count, type],
    );
    await ds.query(
      `INSERT INTO ${DL.text} (id, event_seq, event_type, event_key, handler, attempts, reason, errors, dead_at)
       SELECT gen_random_uuid(), seq, type, event_key, 'A.handle', 3, 'exhausted', '[]', now() - interval '1 minute' FROM ${E.text} WHERE type = $1`,
      [type],
    );
    return;
  }
  // SQLite: times are epoch ms, ids any unique text (the store never parses them).
  const uuid = `lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-8' || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6)))`;
  const nowMs = Date.now();
  await ds.query(
    `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)
     INSERT INTO ${E.text} (id, type, event_key, payload, headers, occurred_at, available_at)
     SELECT ${uuid}, ?, 'k' || (n % 50), '{}', '{}', ?, ? FROM g`,
    [count, type, nowMs, nowMs],
  );
  await ds.query(
    `INSERT INTO ${DL.text} (id, event_seq, event_type, event_key, handler, attempts, reason, errors, dead_at)
     SELECT ${uuid}, seq, type, event_key, 'A.handle', 3, 'exhausted', '[]', ? FROM ${E.text} WHERE type = ?`,
    [nowMs - 60_000, type],
  );
}

function largeOn(dialect: 'postgres' | 'sqlite'): void {
  let ds: DataSource;
  let h: Awaited<ReturnType<typeof storeFor>>;
  const count = async (table: string) =>
    Number((await ds.query(`SELECT COUNT(*) AS n FROM ${table}`))[0].n);

  beforeAll(async () => {
    ds = await openDataSource(dialect as TestDialect);
    h = await storeFor(ds, uniquePrefix(`lp${dialect.slice(0, 2)}`));
  }, 60_000);
  afterAll(async () => {
    await h?.drop();
    await ds?.destroy();
  });
  beforeEach(() => h.empty());

  // Used to fail binding every event number twice in one statement (PostgreSQL above ~32k
  // parameters, SQLite above ~16k variables).
  it(`purges ${DEAD.toLocaleString()} dead letters by filter, reporting the total and leaving nothing`, async () => {
    await fillDeadLetters(ds, dialect, h.tables, 'lp.purge', DEAD);
    await fillDeadLetters(ds, dialect, h.tables, 'lp.keep', 10);
    expect(await h.store.purge({ filter: { type: 'lp.purge' } })).toBe(DEAD);
    expect(await count(h.tables.deadLetters.text)).toBe(10);
    expect(await count(h.tables.events.text)).toBe(10);
    expect((await h.store.stats()).dead).toBe(10);
  }, 300_000);

  it(`replays ${DEAD.toLocaleString()} dead letters by filter, reporting the total`, async () => {
    await fillDeadLetters(ds, dialect, h.tables, 'lp.replay', DEAD);
    expect(await h.store.replay({ filter: { type: 'lp.replay' } })).toBe(DEAD);
    expect(await count(h.tables.deadLetters.text)).toBe(0);
    expect(await count(h.tables.deliveries.text)).toBe(DEAD);
    expect((await h.store.stats()).pending).toBe(DEAD);
  }, 300_000);
}

describe('typeorm large purge and replay on sqlite', () => largeOn('sqlite'));
describeWithService(SERVICE_OF.postgres, 'typeorm large purge and replay', () =>
  largeOn('postgres'),
);
