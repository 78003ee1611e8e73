import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { INestApplication, Injectable, Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import Database from 'better-sqlite3';
import { CamelCasePlugin, Kysely, SqliteDialect, sql } from 'kysely';
import { Pool } from 'pg';
import {
  kyselyExecutor,
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxOptionsError,
  OutboxService,
  OutboxValidationError,
} from 'nestjs-outbox';
import {
  WAKEUP_LISTENERS_TTL_MS,
  wakeupChannel,
  wakeupListenerLock,
} from '../../../lib/stores/typeorm/dialects/postgres/wakeups';
import { TS_REGISTER } from '../../support/child-process';
import { describeWithService } from '../../support/services';
import { openDataSource, uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { kyselyStoreFor, openKysely } from './kysely-test-helpers';

/**
 * docs/stores.md "Without TypeORM: Kysely": `store: { type: 'sql', executor: kyselyExecutor(db, { pool }) }` and
 * `append(events, { tx: trx })` inside `db.transaction().execute(async (trx) => …)`. The event
 * exists iff that transaction commits; it is delivered once, woken by the NOTIFY sent inside the
 * transaction (the poll is a minute here, so only the wake-up can deliver it in time).
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
    await new Promise((r) => setTimeout(r, 20));
  }
  return check();
}

async function startApp(db: Kysely<any>, pool: Pool | undefined, prefix: string, poll: number) {
  @Module({
    imports: [
      ScheduleModule.forRoot(),
      OutboxModule.forRoot({
        store: {
          type: 'sql',
          executor: kyselyExecutor(db, pool ? { pool } : {}),
          tablePrefix: prefix,
          ensureSchema: true,
        },
        dispatcher: { pollInterval: poll },
        retention: { cleanupIntervalMs: 0 },
      }),
    ],
    providers: [Delivered],
  })
  class KyselyApp {}
  const moduleRef = await Test.createTestingModule({ imports: [KyselyApp] }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  await app.init();
  return app;
}

describeWithService('postgres', 'sql store through kyselyExecutor, in an app', () => {
  const prefix = uniquePrefix('kym');
  const orders = `${prefix}orders`;
  let db: Kysely<any>;
  let pool: Pool;
  let app: INestApplication;
  let outbox: OutboxService;

  beforeAll(async () => {
    ({ db, pool } = openKysely());
    // The app's db renames columns (camelCase): the executor runs its statements without plugins.
    db = db.withPlugin(new CamelCasePlugin());
    await pool.query(`CREATE TABLE ${orders} (id text PRIMARY KEY)`);
    app = await startApp(db, pool, prefix, 60_000);
    outbox = app.get(OutboxService);
    const [classid, objid] = wakeupListenerLock(wakeupChannel(prefix, 'public'));
    const listening = await until(async () => {
      const { rows } = await pool.query(
        `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND classid = $1::oid AND objid = $2::oid`,
        [String(classid), String(objid)],
      );
      return rows.length > 0;
    });
    expect(listening).toBe(true);
    // Let the listener's second look pass, so only a wake-up can deliver what the tests commit.
    await new Promise((r) => setTimeout(r, WAKEUP_LISTENERS_TTL_MS + 400));
  });

  afterAll(async () => {
    await app?.close();
    await pool?.query(`DROP TABLE IF EXISTS ${orders}`);
    if (db && pool) await (await kyselyStoreFor(db, pool, prefix)).drop();
    await db?.destroy();
  });

  const delivered = () => app.get(Delivered).ids;
  const eventCount = async (id: string) =>
    Number(
      (await pool.query(`SELECT count(*) AS n FROM ${prefix}events WHERE event_key = $1`, [id]))
        .rows[0].n,
    );
  const order = (id: string) => ({ type: 'order.placed', key: id, payload: { id } });
  const place = async (trx: Kysely<any>, id: string) => {
    await trx.insertInto(orders).values({ id }).execute();
    await outbox.append(order(id), { tx: trx });
  };

  it('a committed transaction: the event is delivered once, woken at commit (no poll)', async () => {
    let seenBeforeCommit = -1;
    await db.transaction().execute(async (trx) => {
      await place(trx, 'committed');
      await new Promise((r) => setTimeout(r, 200));
      seenBeforeCommit = delivered().filter((id) => id === 'committed').length;
    });
    expect(seenBeforeCommit).toBe(0);
    expect(await until(() => delivered().includes('committed'))).toBe(true);
    await app.get(OutboxDispatcher).drain();
    expect(delivered().filter((id) => id === 'committed')).toHaveLength(1);
    expect(await eventCount('committed')).toBe(1);
  });

  it('a rolled-back transaction: neither the order nor the event exists; nothing is delivered', async () => {
    const error = await db
      .transaction()
      .execute(async (trx) => {
        await place(trx, 'rolled-back');
        throw new Error('business rule');
      })
      .catch((e: unknown) => e);
    expect((error as Error).message).toBe('business rule');
    await app.get(OutboxDispatcher).drain();
    expect(delivered()).not.toContain('rolled-back');
    expect(await eventCount('rolled-back')).toBe(0);
    expect((await pool.query(`SELECT 1 FROM ${orders} WHERE id = 'rolled-back'`)).rows).toEqual([]);
  });

  it('a controlled transaction (startTransaction): delivered once after commit, nothing after rollback', async () => {
    const committed = await db.startTransaction().execute();
    await place(committed, 'controlled');
    await committed.commit().execute();
    expect(await until(() => delivered().includes('controlled'))).toBe(true);
    const rolledBack = await db.startTransaction().execute();
    await place(rolledBack, 'controlled-rb');
    await rolledBack.rollback().execute();
    await app.get(OutboxDispatcher).drain();
    expect(delivered().filter((id) => id === 'controlled')).toHaveLength(1);
    expect(await eventCount('controlled-rb')).toBe(0);
    // Once ended, it is refused.
    const error = await outbox.append(order('ended'), { tx: committed }).catch((e: unknown) => e);
    expect((error as OutboxValidationError).field).toBe('options.tx');
    expect((error as Error).message).toMatch(/already committed or rolled back/);
  });

  it('refuses the root db and a db.connection(), and writes nothing', async () => {
    const root = await outbox.append(order('root'), { tx: db }).catch((e: unknown) => e);
    expect(root).toBeInstanceOf(OutboxValidationError);
    expect((root as OutboxValidationError).field).toBe('options.tx');
    expect((root as Error).message).toMatch(/outside any transaction.*isTransaction is false/s);
    const conn = await db
      .connection()
      .execute((c) => outbox.append(order('root'), { tx: c }).catch((e: unknown) => e));
    expect((conn as Error).message).toMatch(/outside any transaction/);
    expect(await eventCount('root')).toBe(0);
  });

  it('refuses a transaction that ended, one that failed, and one of another Kysely', async () => {
    let kept: Kysely<any> | undefined;
    await db.transaction().execute(async (trx) => {
      kept = trx;
    });
    const ended = await outbox.append(order('ended'), { tx: kept }).catch((e: unknown) => e);
    expect((ended as Error).message).toMatch(/options\.tx.*already committed or rolled back/s);

    let failed: unknown;
    // (Its COMMIT rolls back: Kysely rejects with AbortedTransactionError.)
    await db
      .transaction()
      .execute(async (trx) => {
        await sql`SELECT 1/0`.execute(trx).catch(() => undefined);
        failed = await outbox.append(order('failed'), { tx: trx }).catch((e: unknown) => e);
      })
      .catch(() => undefined);
    expect((failed as OutboxValidationError).field).toBe('options.tx');
    expect((failed as Error).message).toMatch(/failed transaction/);

    const other = openKysely(1);
    try {
      const stranger = await other.db
        .transaction()
        .execute((trx) => outbox.append(order('stranger'), { tx: trx }).catch((e: unknown) => e));
      expect((stranger as Error).message).toMatch(/options\.tx.*another Kysely instance/s);
    } finally {
      await other.db.destroy();
    }
    expect(await eventCount('ended')).toBe(0);
    expect(await eventCount('failed')).toBe(0);
    expect(await eventCount('stranger')).toBe(0);
  });

  it('refuses a pg PoolClient and a TypeORM EntityManager as tx, naming what to pass', async () => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const error = await outbox.append(order('pg'), { tx: client }).catch((e: unknown) => e);
      expect((error as OutboxValidationError).field).toBe('options.tx');
      expect((error as Error).message).toMatch(/not a Kysely Transaction.*db\.transaction\(\)/s);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    const ds = await openDataSource('postgres');
    try {
      const asTx = await ds
        .transaction((manager) => outbox.append(order('orm'), { tx: manager }))
        .catch((e: unknown) => e);
      expect((asTx as OutboxValidationError).field).toBe('options.tx');
      expect((asTx as Error).message).toMatch(/TypeORM EntityManager.*Kysely/s);
    } finally {
      await ds.destroy();
    }
  });

  it('without tx, commits the event in its own transaction', async () => {
    await outbox.append(order('own'));
    expect(await until(() => delivered().includes('own'))).toBe(true);
  });
});

describeWithService('postgres', 'kyselyExecutor without the pool', () => {
  it('listens on nothing; events of a committed transaction are found by the poll', async () => {
    const prefix = uniquePrefix('kyn');
    const { db, pool } = openKysely();
    const errors: unknown[] = [];
    const onError = (e: unknown) => errors.push(e);
    process.on('unhandledRejection', onError);
    const app = await startApp(db, undefined, prefix, 300);
    try {
      const outbox = app.get(OutboxService);
      await db.transaction().execute(async (trx) => {
        await outbox.append(
          { type: 'order.placed', key: 'polled', payload: { id: 'polled' } },
          {
            tx: trx,
          },
        );
      });
      expect(await until(() => app.get(Delivered).ids.includes('polled'))).toBe(true);
      const [classid, objid] = wakeupListenerLock(wakeupChannel(prefix, 'public'));
      const { rows } = await pool.query(
        `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND classid = $1::oid AND objid = $2::oid`,
        [String(classid), String(objid)],
      );
      expect(rows).toEqual([]);
      expect(errors).toEqual([]);
    } finally {
      process.off('unhandledRejection', onError);
      await app.close();
      await (await kyselyStoreFor(db, pool, prefix)).drop();
      await db.destroy();
    }
  });
});

describe('kyselyExecutor(db) options', () => {
  it('refuses what is not a root Kysely on PostgreSQL, and a pool that is not one', async () => {
    expect(() => kyselyExecutor({ query() {} })).toThrow(OutboxOptionsError);
    expect(() => kyselyExecutor({ query() {} })).toThrow(/store\.executor.*Kysely instance/s);
    const sqlite = new Kysely<any>({
      dialect: new SqliteDialect({ database: new Database(':memory:') }),
    });
    try {
      expect(() => kyselyExecutor(sqlite)).toThrow(/PostgreSQL \(PostgresDialect\)/);
      const inTrx = await sqlite
        .transaction()
        .execute(async (trx) => (() => kyselyExecutor(trx)) as () => unknown);
      expect(inTrx).toThrow(/root Kysely instance, not a Transaction/);
    } finally {
      await sqlite.destroy();
    }
    const { db } = openKysely(1);
    try {
      expect(() => kyselyExecutor(db, { pool: {} })).toThrow(/\{ pool \}.*pg Pool/s);
      expect(kyselyExecutor(db).listenerConnection?.()).toBeNull();
    } finally {
      await db.destroy();
    }
  });

  it('names the package to install when kysely is missing', () => {
    const script = `
      const Module = require('node:module');
      const resolveFilename = Module._resolveFilename;
      Module._resolveFilename = function (request, ...rest) {
        if (request === 'kysely' || request.startsWith('kysely/')) {
          throw Object.assign(new Error("Cannot find module '" + request + "'"), { code: 'MODULE_NOT_FOUND' });
        }
        return resolveFilename.call(this, request, ...rest);
      };
      require('reflect-metadata');
      const { kyselyExecutor } = require('./lib/index.ts');
      try { kyselyExecutor({}); console.log('no error'); } catch (e) { console.log(e.name + ': ' + e.message); }
    `;
    const out = execFileSync(process.execPath, ['-r', TS_REGISTER, '-e', script], {
      cwd: resolve(__dirname, '..', '..', '..'),
      encoding: 'utf8',
      env: { ...process.env, TS_NODE_PROJECT: 'tsconfig.json' },
    });
    expect(out.trim().split('\n').pop()).toMatch(
      /MissingDependencyError: .*kyselyExecutor.*"kysely".*npm install kysely/,
    );
  });
});
