import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { INestApplication, Injectable, Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { Client, Pool, PoolClient } from 'pg';
import {
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxOptionsError,
  OutboxService,
  OutboxValidationError,
  pgExecutor,
} from 'nestjs-outbox';
import {
  WAKEUP_LISTENERS_TTL_MS,
  wakeupChannel,
  wakeupListenerLock,
} from '../../../lib/stores/typeorm/dialects/postgres/wakeups';
import { describeWithService } from '../../support/services';
import { openDataSource, uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { openPool, pgStoreFor } from './pg-test-helpers';
import { resolveOutboxOptions } from '../../../lib/outbox-options';

/**
 * docs/stores.md "Without TypeORM: node-postgres": `store: { type: 'sql', executor: pgExecutor(pool) }`
 * and `append(events, { tx: client })` with a PoolClient after BEGIN. The event exists iff that
 * transaction commits; it is delivered once, woken by the NOTIFY sent inside the transaction
 * (the poll is a minute here, so only the wake-up can deliver it in time).
 */

@Injectable()
class Delivered {
  readonly ids: string[] = [];
  @OutboxHandler('order.placed')
  handle(event: OutboxEvent<{ id: string }>): void {
    this.ids.push(event.payload.id);
  }
}

async function until(check: () => boolean | Promise<boolean>, ms = 5_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return check();
}

describeWithService('postgres', 'sql store through pgExecutor, in an app', () => {
  const prefix = uniquePrefix('pgm');
  const orders = `${prefix}orders`;
  let pool: Pool;
  let app: INestApplication;
  let outbox: OutboxService;

  beforeAll(async () => {
    pool = openPool();
    await pool.query(`CREATE TABLE ${orders} (id text PRIMARY KEY)`);
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: {
            type: 'sql',
            executor: pgExecutor(pool),
            tablePrefix: prefix,
            ensureSchema: true,
          },
          dispatcher: { pollInterval: 60_000 },
          retention: { cleanupIntervalMs: 0 },
        }),
      ],
      providers: [Delivered],
    })
    class PgApp {}
    const moduleRef = await Test.createTestingModule({ imports: [PgApp] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    outbox = app.get(OutboxService);
    // The dispatcher listens once its connection holds the channel's listener lock.
    const [classid, objid] = wakeupListenerLock(wakeupChannel(prefix, 'public'));
    const listening = await until(async () => {
      const { rows } = await pool.query(
        `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND classid = $1::oid AND objid = $2::oid`,
        [String(classid), String(objid)],
      );
      return rows.length > 0;
    });
    expect(listening).toBe(true);
    // The listener looks again once WAKEUP_LISTENERS_TTL_MS after connecting: let that pass, so
    // only a wake-up can deliver what the tests commit.
    await new Promise((resolve) => setTimeout(resolve, WAKEUP_LISTENERS_TTL_MS + 400));
  });

  afterAll(async () => {
    await app?.close();
    await pool?.query(`DROP TABLE IF EXISTS ${orders}`);
    await (await pgStoreFor(pool, prefix)).drop();
    await pool?.end();
  });

  const delivered = () => app.get(Delivered).ids;
  const eventCount = async (id: string) =>
    Number(
      (await pool.query(`SELECT count(*) AS n FROM ${prefix}events WHERE event_key = $1`, [id]))
        .rows[0].n,
    );

  async function inTransaction<T>(body: (client: PoolClient) => Promise<T>, commit: boolean) {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const result = await body(client);
      await client.query(commit ? 'COMMIT' : 'ROLLBACK');
      return result;
    } catch (error) {
      await client.query('ROLLBACK');
      throw error;
    } finally {
      client.release();
    }
  }

  const place = (client: PoolClient, id: string) =>
    client
      .query(`INSERT INTO ${orders} (id) VALUES ($1)`, [id])
      .then(() =>
        outbox.append({ type: 'order.placed', key: id, payload: { id } }, { tx: client }),
      );

  it('a committed transaction: the event is delivered once, woken at commit (no poll)', async () => {
    let seenBeforeCommit = -1;
    await inTransaction(async (client) => {
      await place(client, 'committed');
      await new Promise((resolve) => setTimeout(resolve, 200));
      seenBeforeCommit = delivered().filter((id) => id === 'committed').length;
    }, true);
    expect(seenBeforeCommit).toBe(0);
    expect(await until(() => delivered().includes('committed'))).toBe(true);
    await app.get(OutboxDispatcher).drain();
    expect(delivered().filter((id) => id === 'committed')).toHaveLength(1);
    expect(await eventCount('committed')).toBe(1);
  });

  it('a rolled-back transaction: neither the order nor the event exists; nothing is delivered', async () => {
    await inTransaction((client) => place(client, 'rolled-back'), false);
    await app.get(OutboxDispatcher).drain();
    expect(delivered()).not.toContain('rolled-back');
    expect(await eventCount('rolled-back')).toBe(0);
    expect((await pool.query(`SELECT 1 FROM ${orders} WHERE id = 'rolled-back'`)).rows).toEqual([]);
  });

  it('refuses a client outside a transaction, and writes nothing', async () => {
    const client = await pool.connect();
    try {
      await client.query('SELECT 1');
      const error = await outbox
        .append(
          { type: 'order.placed', key: 'no-begin', payload: { id: 'no-begin' } },
          { tx: client },
        )
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect((error as OutboxValidationError).field).toBe('options.tx');
      expect((error as Error).message).toMatch(/not inside an open transaction.*BEGIN/s);
    } finally {
      client.release();
    }
    expect(await eventCount('no-begin')).toBe(0);
  });

  it('without pg’s transaction status, tells a transaction from none by one statement', async () => {
    const client = await pool.connect();
    // pg before 8.16 has no getTransactionStatus(): the executor asks the server.
    (client as unknown as { getTransactionStatus?: unknown }).getTransactionStatus = undefined;
    try {
      const refused = await outbox
        .append({ type: 'order.placed', key: 'old-pg', payload: { id: 'old-pg' } }, { tx: client })
        .catch((e: unknown) => e);
      expect((refused as OutboxValidationError).field).toBe('options.tx');
      await client.query('BEGIN');
      await client.query('SELECT 1');
      await outbox.append(
        { type: 'order.placed', key: 'old-pg', payload: { id: 'old-pg' } },
        { tx: client },
      );
      await client.query('ROLLBACK');
    } finally {
      delete (client as unknown as { getTransactionStatus?: unknown }).getTransactionStatus;
      client.release();
    }
    expect(await eventCount('old-pg')).toBe(0);
  });

  it('does not trust a status pg has not confirmed yet (a statement still in flight)', async () => {
    const client = await pool.connect();
    const c = client as unknown as { getTransactionStatus?: () => string };
    try {
      // A status that says 'T' while no transaction is open (as right after a failed COMMIT,
      // before its ReadyForQuery is read), with a statement in flight: the executor asks the
      // server, behind that statement, and refuses.
      c.getTransactionStatus = () => 'T';
      const inFlight = client.query('SELECT pg_sleep(0.05)');
      const error = await outbox
        .append({ type: 'order.placed', key: 'stale', payload: { id: 'stale' } }, { tx: client })
        .catch((e: unknown) => e);
      await inFlight;
      expect((error as OutboxValidationError).field).toBe('options.tx');
      expect((error as Error).message).toMatch(/not inside an open transaction/);
      // In a failed transaction the statement asked fails with 25P02: refused as failed.
      delete c.getTransactionStatus;
      await client.query('BEGIN');
      await client.query('SELECT 1/0').catch(() => undefined);
      const alsoFailing = client.query('SELECT 1').catch(() => undefined);
      const failed = await outbox
        .append({ type: 'order.placed', key: 'stale', payload: { id: 'stale' } }, { tx: client })
        .catch((e: unknown) => e);
      await alsoFailing;
      expect((failed as Error).message).toMatch(/options\.tx.*failed transaction/s);
      await client.query('ROLLBACK');
    } finally {
      delete c.getTransactionStatus;
      client.release();
    }
    expect(await eventCount('stale')).toBe(0);
  });

  it('refuses a transaction that already failed', async () => {
    const error = await inTransaction(async (client) => {
      await client.query('SELECT 1/0').catch(() => undefined);
      return outbox
        .append({ type: 'order.placed', key: 'failed', payload: { id: 'failed' } }, { tx: client })
        .catch((e: unknown) => e);
    }, false);
    expect((error as OutboxValidationError).field).toBe('options.tx');
    expect((error as Error).message).toMatch(/failed transaction/);
  });

  it('refuses a TypeORM EntityManager as tx, and { manager }, naming what to pass', async () => {
    const ds = await openDataSource('postgres');
    try {
      const asTx = await ds
        .transaction((manager) =>
          outbox.append(
            { type: 'order.placed', key: 'orm', payload: { id: 'orm' } },
            { tx: manager },
          ),
        )
        .catch((e: unknown) => e);
      expect(asTx).toBeInstanceOf(OutboxValidationError);
      expect((asTx as OutboxValidationError).field).toBe('options.tx');
      expect((asTx as Error).message).toMatch(/TypeORM EntityManager.*node-postgres.*PoolClient/s);
      const asManager = await ds
        .transaction((manager) =>
          outbox.append({ type: 'order.placed', key: 'orm', payload: { id: 'orm' } }, { manager }),
        )
        .catch((e: unknown) => e);
      expect(asManager).toBeInstanceOf(OutboxValidationError);
      expect((asManager as OutboxValidationError).field).toBe('options.manager');
      expect((asManager as Error).message).toMatch(/options\.tx/);
    } finally {
      await ds.destroy();
    }
    expect(await eventCount('orm')).toBe(0);
  });

  it('refuses the pool itself, and a client of another pool', async () => {
    const poolError = await outbox
      .append({ type: 'order.placed', key: 'pool', payload: { id: 'pool' } }, { tx: pool })
      .catch((e: unknown) => e);
    expect((poolError as Error).message).toMatch(/options\.tx.*pg Pool/s);
    const other = openPool(1);
    const stranger = await other.connect();
    try {
      await stranger.query('BEGIN');
      const error = await outbox
        .append(
          { type: 'order.placed', key: 'stranger', payload: { id: 'stranger' } },
          { tx: stranger },
        )
        .catch((e: unknown) => e);
      expect((error as Error).message).toMatch(/options\.tx.*not a client of the pool/s);
      await stranger.query('ROLLBACK');
    } finally {
      stranger.release();
      await other.end();
    }
  });

  it('without tx, commits the event in its own transaction', async () => {
    await outbox.append({ type: 'order.placed', key: 'own', payload: { id: 'own' } });
    expect(await until(() => delivered().includes('own'))).toBe(true);
  });
});

describe("the 'sql' store's options", () => {
  const executor = pgExecutor(openPool(1));

  it('refuses something that is not an executor, and unknown keys', () => {
    expect(() => resolveOutboxOptions({ store: { type: 'sql', executor: {} as never } })).toThrow(
      /store\.executor.*pgExecutor\(pool\)/s,
    );
    expect(() =>
      resolveOutboxOptions({ store: { type: 'sql', executor, tablePrefx: 'x_' } as never }),
    ).toThrow(/store\.tablePrefx.*did you mean store\.tablePrefix/s);
    expect(() => pgExecutor({ query() {} })).toThrow(OutboxOptionsError);
    // A single Client (connect() and query(), but no pool): refused, naming the Pool to pass.
    expect(() => pgExecutor(new Client())).toThrow(/pgExecutor\(pool\) needs a pg Pool.*Client/s);
  });

  it('tx is refused by a store that cannot join a transaction', async () => {
    @Module({
      imports: [
        OutboxModule.forRoot({ store: { type: 'memory' }, dispatcher: { enabled: false } }),
      ],
    })
    class MemoryApp {}
    const moduleRef = await Test.createTestingModule({ imports: [MemoryApp] }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    try {
      const error = await app
        .get(OutboxService)
        .append({ type: 'x', payload: {} }, { tx: {} })
        .catch((e: unknown) => e);
      expect((error as OutboxValidationError).field).toBe('options.tx');
    } finally {
      await app.close();
    }
  });
});
