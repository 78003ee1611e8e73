import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, beforeEach, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import {
  AppendableEvent,
  HandlerSubscription,
} from '../../../lib/interfaces/outbox-store.interface';
import { sql } from '../../../lib/stores/typeorm/sql';
import { TypeOrmOutboxStore } from '../../../lib/stores/typeorm/internal';
import { describeWithService } from '../../support/services';
import { openDataSource, SERVICE_OF, storeFor, uniquePrefix } from './typeorm-test-helpers';

const H: HandlerSubscription = { name: 'H', types: ['mc.event'] };

function event(key: string | null): AppendableEvent {
  const id = randomUUID();
  return {
    id,
    type: 'mc.event',
    payload: { id },
    key,
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers: [H.name],
  };
}

const claimOf = (store: TypeOrmOutboxStore, workerId: string, limit = 10) =>
  store.claim({ workerId, handlers: [H], limit, leaseMs: 60_000 });

/**
 * How the next transaction on the (single) pooled connection of `ds` reads: whether it sees a row
 * another connection commits after its first read (READ COMMITTED) or not (REPEATABLE READ).
 */
async function nextTransactionIsolation(
  ds: DataSource,
  other: DataSource,
  scratch: string,
): Promise<string> {
  const runner = ds.createQueryRunner('master');
  const count = async () =>
    Number(
      ((await runner.query(`SELECT COUNT(*) AS n FROM ${scratch}`)) as Array<{ n: number }>)[0].n,
    );
  try {
    await runner.query('START TRANSACTION');
    const first = await count();
    await other.query(`INSERT INTO ${scratch} (id) VALUES (?)`, [randomUUID()]);
    const second = await count();
    await runner.query('ROLLBACK');
    return second === first ? 'REPEATABLE READ' : 'READ COMMITTED';
  } finally {
    await runner.release();
  }
}

/**
 * MariaDB's claim is an autocommit `INSERT … SELECT … FOR UPDATE SKIP LOCKED`. It must not wait
 * for other transactions (their rows are skipped or, in the per-key checks, read as committed),
 * must leave pooled connections as it found them, and claimers of different processes must not
 * take the same slice of the candidate window.
 */
describeWithService(SERVICE_OF.mariadb, 'typeorm MariaDB claim', () => {
  let ds1: DataSource;
  let ds2: DataSource;
  let a: Awaited<ReturnType<typeof storeFor>>;
  let b: TypeOrmOutboxStore;
  let scratch: string;
  const isolation = () => nextTransactionIsolation(ds2, ds1, scratch);

  beforeAll(async () => {
    // One connection each: whatever a claim leaves on its connection, the next user gets.
    ds1 = await openDataSource('mariadb', { connectionLimit: 2 });
    ds2 = await openDataSource('mariadb', { connectionLimit: 1 });
    const prefix = uniquePrefix('mc');
    a = await storeFor(ds1, prefix);
    b = new TypeOrmOutboxStore(ds2, { tablePrefix: prefix });
    scratch = `${prefix}iso`;
    await ds1.query(`CREATE TABLE ${scratch} (id VARCHAR(36) PRIMARY KEY) ENGINE=InnoDB`);
  }, 60_000);
  afterAll(async () => {
    await ds1?.query(`DROP TABLE IF EXISTS ${scratch}`);
    await a?.drop();
    await ds1?.destroy();
    await ds2?.destroy();
  });
  beforeEach(() => a.empty());

  describe('beside an open application transaction', () => {
    let release: () => void = () => undefined;
    afterEach(() => release());

    it('does not wait for a transaction holding an uncommitted event of a key', async () => {
      // Before: the claim waited for the open transaction (innodb_lock_wait_timeout, 50 s by
      // default), every key and handler with it.
      let released = false;
      const held = new Promise<void>((resolve) => (release = resolve));
      const tx = ds1.transaction(async (manager) => {
        await a.store.append([event('k')], { manager });
        await held;
      });
      await new Promise((resolve) => setTimeout(resolve, 300));
      await b.append([event('k')]);
      const free = event('other');
      await b.append([free]);
      const timer = setTimeout(() => {
        released = true;
        release();
      }, 20_000);
      const claimed = await claimOf(b, 'w');
      const stillOpen = !released;
      clearTimeout(timer);
      release();
      await tx;
      expect(stillOpen).toBe(true);
      expect(claimed.map((c) => c.event.id)).toContain(free.id);
    }, 60_000);
  });

  it('leaves the pooled connection at its own isolation level', async () => {
    await b.append([event(null), event('k')]);
    const before = await isolation();
    expect(before).toBe('REPEATABLE READ');
    expect(await claimOf(b, 'w')).toHaveLength(2);
    expect(await isolation()).toBe(before);
  });

  it('leaves the pooled connection at its own isolation level when the claim statement fails', async () => {
    await b.append([event(null)]);
    const before = await isolation();
    expect(before).toBe('REPEATABLE READ');
    const dialect = (b as unknown as { ctx: { dialect: Record<string, unknown> } }).ctx.dialect;
    const original = dialect.claimStatement;
    dialect.claimStatement = () => sql`SELEC no_such_statement`;
    try {
      await expect(claimOf(b, 'w')).rejects.toThrow(/syntax/);
    } finally {
      dialect.claimStatement = original;
    }
    expect(await isolation()).toBe(before);
    expect(await claimOf(b, 'w')).toHaveLength(1);
  });

  it('gives claims of one process that overlap in any order full, disjoint batches', async () => {
    // ds1 has two connections, so two claims of one store run at once. The window a claim reads
    // shrinks while claims meet no other claimer: it must still hold a full batch beside the ids
    // the other running claim is locking, whichever started or finished first.
    const one = new TypeOrmOutboxStore(ds1, { tablePrefix: a.tables.prefix });
    for (let i = 0; i < 12; i++)
      await a.store.append(Array.from({ length: 100 }, () => event(null)));
    const seen = new Set<string>();
    const sizes: number[] = [];
    const take = async () => {
      const got = await claimOf(one, 'w', 50);
      sizes.push(got.length);
      for (const c of got) {
        expect(seen.has(c.id)).toBe(false);
        seen.add(c.id);
      }
    };
    // Pairs started together, then a chain where each claim starts when the one before the
    // previous has finished (always one running beside it).
    for (let round = 0; round < 6; round++) await Promise.all([take(), take()]);
    let running = take();
    for (let i = 0; i < 10; i++) {
      const next = take();
      await running;
      running = next;
    }
    await running;
    expect(sizes).toEqual(Array(sizes.length).fill(50));
    expect(seen.size).toBe(23 * 50);
  }, 60_000);

  it('claims without an on-disk temporary table (the LONGTEXT errors column is not read)', async () => {
    await a.store.append(Array.from({ length: 100 }, () => event(null)));
    // `b` has one pooled connection: the session counter is its claims'.
    const onDisk = async () =>
      Number(
        (
          (await ds2.query(`SHOW SESSION STATUS LIKE 'Created_tmp_disk_tables'`)) as Array<{
            Value: string;
          }>
        )[0].Value,
      );
    const before = await onDisk();
    const claimed = [...(await claimOf(b, 'wt', 50)), ...(await claimOf(b, 'wt', 50))];
    expect(claimed).toHaveLength(100);
    expect(await onDisk()).toBe(before);
  });

  it('lets claimers of two processes take full batches from one backlog', async () => {
    const other = new TypeOrmOutboxStore(ds1, { tablePrefix: a.tables.prefix });
    for (let i = 0; i < 10; i++)
      await a.store.append(Array.from({ length: 100 }, () => event(null)));
    const rounds: number[][] = [];
    for (let round = 0; round < 8; round++) {
      const [x, y] = await Promise.all([claimOf(other, 'w1', 50), claimOf(b, 'w2', 50)]);
      rounds.push([x.length, y.length]);
      const ids = [...x, ...y].map((c) => c.id);
      expect(new Set(ids).size).toBe(ids.length);
    }
    // Before: both started with the oldest slice, and one of the two came back (nearly) empty
    // in most rounds, e.g. [[0,50],[50,0],[0,50],[49,1],…].
    const full = rounds.filter(([x, y]) => x === 50 && y === 50);
    if (full.length < 6) console.log(`rounds: ${JSON.stringify(rounds)}`);
    expect(full.length).toBeGreaterThanOrEqual(6);
  }, 60_000);
});
