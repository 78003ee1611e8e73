import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { INestApplication, Injectable, Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { createPool as createCallbackPool } from 'mysql2';
import { createConnection, Pool, PoolConnection } from 'mysql2/promise';
import {
  mysql2Executor,
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxOptionsError,
  OutboxService,
  OutboxValidationError,
} from 'nestjs-outbox';
import { Mysql2Connection } from '../../../lib/executors/mysql2-executor';
import { TS_REGISTER } from '../../support/child-process';
import { describeWithService, SERVICES } from '../../support/services';
import { openDataSource, uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { mysql2StoreFor, openMysqlPool } from './mysql2-test-helpers';

/**
 * docs/stores.md "Without TypeORM: mysql2": `store: { type: 'sql', executor: mysql2Executor(pool) }` and
 * `append(events, { tx: conn })` with a PoolConnection after `beginTransaction()`. The event
 * exists iff that transaction commits; the dispatcher's poll delivers it once.
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

const connectionOptions = {
  host: SERVICES.mariadb.host,
  port: SERVICES.mariadb.port,
  user: process.env.MYSQL_USER ?? 'root',
  password: process.env.MYSQL_PASSWORD ?? '',
  database: process.env.MYSQL_DATABASE ?? 'test',
};

describeWithService('mariadb', 'sql store through mysql2Executor, in an app', () => {
  const prefix = uniquePrefix('my2m');
  const orders = `${prefix}orders`;
  let pool: Pool;
  let app: INestApplication;
  let outbox: OutboxService;
  const backToBack = jest.spyOn(Mysql2Connection.prototype, 'queryBackToBack');

  beforeAll(async () => {
    pool = openMysqlPool();
    await pool.query(`CREATE TABLE ${orders} (id VARCHAR(64) PRIMARY KEY)`);
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: {
            type: 'sql',
            executor: mysql2Executor(pool),
            tablePrefix: prefix,
            ensureSchema: true,
          },
          dispatcher: { pollInterval: 100 },
          retention: { cleanupIntervalMs: 0 },
        }),
      ],
      providers: [Delivered],
    })
    class Mysql2App {}
    const moduleRef = await Test.createTestingModule({ imports: [Mysql2App] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    outbox = app.get(OutboxService);
  });

  afterAll(async () => {
    backToBack.mockRestore();
    await app?.close();
    await pool?.query(`DROP TABLE IF EXISTS ${orders}`);
    if (pool) await (await mysql2StoreFor(pool, prefix)).drop();
    await pool?.end();
  });

  const delivered = () => app.get(Delivered).ids;
  const eventCount = async (id: string) => {
    const [rows] = await pool.query(
      `SELECT count(*) AS n FROM ${prefix}events WHERE event_key = ?`,
      [id],
    );
    return Number((rows as Array<{ n: number }>)[0].n);
  };

  async function inTransaction<T>(body: (conn: PoolConnection) => Promise<T>, commit: boolean) {
    const conn = await pool.getConnection();
    try {
      await conn.beginTransaction();
      const result = await body(conn);
      await (commit ? conn.commit() : conn.rollback());
      return result;
    } catch (error) {
      await conn.rollback();
      throw error;
    } finally {
      conn.release();
    }
  }

  const place = (conn: PoolConnection, id: string) =>
    conn
      .query(`INSERT INTO ${orders} (id) VALUES (?)`, [id])
      .then(() => outbox.append({ type: 'order.placed', key: id, payload: { id } }, { tx: conn }));

  it('a committed transaction: the event is delivered once, after the commit', async () => {
    let seenBeforeCommit = -1;
    await inTransaction(async (conn) => {
      await place(conn, 'committed');
      await new Promise((resolve) => setTimeout(resolve, 300));
      seenBeforeCommit = delivered().filter((id) => id === 'committed').length;
    }, true);
    expect(seenBeforeCommit).toBe(0);
    expect(await until(() => delivered().includes('committed'))).toBe(true);
    await app.get(OutboxDispatcher).drain();
    expect(delivered().filter((id) => id === 'committed')).toHaveLength(1);
    expect(await eventCount('committed')).toBe(1);
    // MariaDB was recognised: its one-statement claim ran, both of its statements sent together.
    expect(backToBack).toHaveBeenCalled();
  });

  it('a rolled-back transaction: neither the order nor the event exists; nothing is delivered', async () => {
    await inTransaction((conn) => place(conn, 'rolled-back'), false);
    await app.get(OutboxDispatcher).drain();
    expect(delivered()).not.toContain('rolled-back');
    expect(await eventCount('rolled-back')).toBe(0);
    const [rows] = await pool.query(`SELECT 1 FROM ${orders} WHERE id = 'rolled-back'`);
    expect(rows).toEqual([]);
  });

  it('refuses a connection outside a transaction, and writes nothing', async () => {
    const conn = await pool.getConnection();
    try {
      const error = await outbox
        .append(
          { type: 'order.placed', key: 'no-begin', payload: { id: 'no-begin' } },
          { tx: conn },
        )
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect((error as OutboxValidationError).field).toBe('options.tx');
      expect((error as Error).message).toMatch(/not inside an open transaction.*beginTransaction/s);
    } finally {
      conn.release();
    }
    expect(await eventCount('no-begin')).toBe(0);
  });

  it('accepts a connection with autocommit off (always inside a transaction)', async () => {
    const conn = await pool.getConnection();
    try {
      await conn.query('SET autocommit = 0');
      await outbox.append(
        { type: 'order.placed', key: 'no-autocommit', payload: { id: 'no-autocommit' } },
        { tx: conn },
      );
      await conn.rollback();
    } finally {
      await conn.query('SET autocommit = 1');
      conn.release();
    }
    expect(await eventCount('no-autocommit')).toBe(0);
  });

  it('refuses a released connection, the pool, another pool’s connection and a plain object', async () => {
    const append = (tx: unknown, key: string) =>
      outbox.append({ type: 'order.placed', key, payload: { id: key } }, { tx }).then(
        () => new Error('accepted'),
        (e: unknown) => e as Error,
      );
    const released = await pool.getConnection();
    await released.beginTransaction();
    await released.rollback();
    released.release();
    expect((await append(released, 'released')).message).toMatch(/options\.tx.*released/s);
    expect((await append(pool, 'pool')).message).toMatch(/options\.tx.*mysql2 Pool/s);
    expect((await append({ query() {} }, 'plain')).message).toMatch(
      /options\.tx.*not a mysql2 PoolConnection/s,
    );
    const other = openMysqlPool(1);
    const stranger = await other.getConnection();
    try {
      await stranger.beginTransaction();
      expect((await append(stranger, 'stranger')).message).toMatch(
        /options\.tx.*not a connection of the pool/s,
      );
      await stranger.rollback();
    } finally {
      stranger.release();
      await other.end();
    }
    for (const key of ['released', 'pool', 'plain', 'stranger']) {
      expect(await eventCount(key)).toBe(0);
    }
  });

  it('refuses a TypeORM EntityManager as tx, naming what to pass', async () => {
    const ds = await openDataSource('mariadb');
    try {
      const asTx = await ds
        .transaction((manager) =>
          outbox.append(
            { type: 'order.placed', key: 'orm', payload: { id: 'orm' } },
            { tx: manager },
          ),
        )
        .catch((e: unknown) => e);
      expect((asTx as OutboxValidationError).field).toBe('options.tx');
      expect((asTx as Error).message).toMatch(/TypeORM EntityManager.*mysql2.*PoolConnection/s);
    } finally {
      await ds.destroy();
    }
    expect(await eventCount('orm')).toBe(0);
  });

  it('without tx, commits the event in its own transaction', async () => {
    await outbox.append({ type: 'order.placed', key: 'own', payload: { id: 'own' } });
    expect(await until(() => delivered().includes('own'))).toBe(true);
  });
});

describeWithService('mariadb', 'mysql2Executor', () => {
  it('refuses a single Connection and things that are not a pool', async () => {
    const single = await createConnection(connectionOptions);
    try {
      expect(() => mysql2Executor(single)).toThrow(
        /store\.executor.*mysql2Executor\(pool\) needs a mysql2 Pool.*single Connection/s,
      );
      expect(() => mysql2Executor({})).toThrow(OutboxOptionsError);
    } finally {
      await single.end();
    }
  });

  it('takes a callback pool too: its transaction object is the callback PoolConnection', async () => {
    const callbackPool = createCallbackPool({ ...connectionOptions, connectionLimit: 2 });
    try {
      const executor = mysql2Executor(callbackPool);
      expect(executor.ownsClient?.(callbackPool)).toBe(true);
      expect(await executor.serverFlavor?.()).toBe('mariadb');
      await executor.clientTransaction!(async (tx) => {
        expect(typeof (tx as { beginTransaction?: unknown }).beginTransaction).toBe('function');
        expect((tx as { promise?: unknown }).promise).toBeInstanceOf(Function);
        const caller = await executor.transactionOf(tx);
        expect(caller.key).toBe(tx);
      });
    } finally {
      await new Promise((resolve) => callbackPool.end(resolve));
    }
  });

  it('clientTransaction: the promise PoolConnection, committed with fn, rolled back when it throws', async () => {
    const pool = openMysqlPool(2);
    const table = `${uniquePrefix('my2x')}t`;
    try {
      await pool.query(`CREATE TABLE ${table} (id INT PRIMARY KEY)`);
      const executor = mysql2Executor(pool);
      expect(executor.ownsClient?.(pool)).toBe(true);
      expect(executor.ownsClient?.(openMysqlPool)).toBe(false);
      await executor.clientTransaction!(
        async (tx, connection) => {
          await (tx as PoolConnection).query(`INSERT INTO ${table} VALUES (1)`);
          await connection.query({ text: `INSERT INTO ${table} VALUES (?)`, params: [2] });
          // The transaction's own level (the session's @@tx_isolation is unchanged).
          const [rows] = await (tx as PoolConnection).query(
            'SELECT trx_isolation_level AS level FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = CONNECTION_ID()',
          );
          expect((rows as Array<{ level: string }>)[0].level).toBe('SERIALIZABLE');
        },
        { isolation: 'SERIALIZABLE' },
      );
      const failed = await executor.clientTransaction!(async (tx) => {
        await (tx as PoolConnection).query(`INSERT INTO ${table} VALUES (3)`);
        throw new Error('boom');
      }).catch((e: Error) => e);
      expect(failed).toEqual(new Error('boom'));
      const { rows } = await executor.query({
        text: `SELECT id FROM ${table} ORDER BY id`,
        params: [],
      });
      expect(rows.map((r) => r.id)).toEqual([1, 2]);
      // Driver errors carry mysql2's errno and code, which the dialect reads.
      const missing = await executor
        .query({ text: `SELECT 1 FROM ${table}_missing`, params: [] })
        .catch((e: { errno?: number; code?: string }) => e);
      expect(missing).toMatchObject({ errno: 1146, code: 'ER_NO_SUCH_TABLE' });
    } finally {
      await pool.query(`DROP TABLE IF EXISTS ${table}`);
      await pool.end();
    }
  });
});

describe('mysql2Executor without mysql2 installed', () => {
  it('names the package to install', () => {
    const script = `
      const Module = require('node:module');
      const resolveFilename = Module._resolveFilename;
      Module._resolveFilename = function (request, ...rest) {
        if (request === 'mysql2' || request.startsWith('mysql2/')) {
          throw Object.assign(new Error("Cannot find module '" + request + "'"), { code: 'MODULE_NOT_FOUND' });
        }
        return resolveFilename.call(this, request, ...rest);
      };
      require('reflect-metadata');
      const { mysql2Executor } = require('./lib/index.ts');
      try { mysql2Executor({}); console.log('no error'); } catch (e) { console.log(e.name + ': ' + e.message); }
    `;
    const out = execFileSync(process.execPath, ['-r', TS_REGISTER, '-e', script], {
      cwd: resolve(__dirname, '..', '..', '..'),
      encoding: 'utf8',
      env: { ...process.env, TS_NODE_PROJECT: 'tsconfig.json' },
    });
    expect(out.trim().split('\n').pop()).toMatch(
      /MissingDependencyError: .*mysql2Executor.*"mysql2".*npm install mysql2/,
    );
  });
});
