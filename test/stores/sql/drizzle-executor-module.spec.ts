import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { INestApplication, Injectable, Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { sql, TransactionRollbackError } from 'drizzle-orm';
import { drizzle, NodePgDatabase } from 'drizzle-orm/node-postgres';
import { Client, Pool } from 'pg';
import {
  drizzleExecutor,
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
import { openPool, pgStoreFor } from './pg-test-helpers';

/**
 * docs/stores.md "Without TypeORM: Drizzle": `store: { type: 'sql', executor: drizzleExecutor(db) }` and
 * `append(events, { tx })` with Drizzle's `tx` of `db.transaction()`. The event exists iff that
 * transaction commits; it is delivered once, woken by the NOTIFY sent inside the transaction (the
 * poll is a minute here, so only the wake-up can deliver it in time).
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

class Rollback extends Error {}

describeWithService('postgres', 'sql store through drizzleExecutor, in an app', () => {
  const prefix = uniquePrefix('dzm');
  const orders = `${prefix}orders`;
  let pool: Pool;
  let db: NodePgDatabase;
  let app: INestApplication;
  let outbox: OutboxService;

  beforeAll(async () => {
    pool = openPool();
    db = drizzle({ client: pool });
    await pool.query(`CREATE TABLE ${orders} (id text PRIMARY KEY)`);
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: {
            type: 'sql',
            executor: drizzleExecutor(db),
            tablePrefix: prefix,
            ensureSchema: true,
          },
          dispatcher: { pollInterval: 60_000 },
          retention: { cleanupIntervalMs: 0 },
        }),
      ],
      providers: [Delivered],
    })
    class DrizzleApp {}
    const moduleRef = await Test.createTestingModule({ imports: [DrizzleApp] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
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
    // Past the listener's second look, so only a wake-up can deliver what the tests commit.
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
  const event = (id: string) => ({ type: 'order.placed', key: id, payload: { id } });
  const refusal = (tx: unknown, id: string) =>
    outbox.append(event(id), { tx }).then(
      () => undefined,
      (e: unknown) => e as OutboxValidationError,
    );

  it('a committed transaction: the event is delivered once, woken at commit (no poll)', async () => {
    let seenBeforeCommit = -1;
    await db.transaction(async (tx) => {
      await tx.execute(sql`INSERT INTO ${sql.raw(orders)} (id) VALUES (${'committed'})`);
      await outbox.append(event('committed'), { tx });
      await new Promise((resolve) => setTimeout(resolve, 200));
      seenBeforeCommit = delivered().filter((id) => id === 'committed').length;
    });
    expect(seenBeforeCommit).toBe(0);
    expect(await until(() => delivered().includes('committed'))).toBe(true);
    await app.get(OutboxDispatcher).drain();
    expect(delivered().filter((id) => id === 'committed')).toHaveLength(1);
    expect(await eventCount('committed')).toBe(1);
  });

  it('a rolled-back transaction (tx.rollback() or a throw): neither the order nor the event exists', async () => {
    await expect(
      db.transaction(async (tx) => {
        await tx.execute(sql`INSERT INTO ${sql.raw(orders)} (id) VALUES (${'rolled-back'})`);
        await outbox.append(event('rolled-back'), { tx });
        tx.rollback();
      }),
    ).rejects.toBeInstanceOf(TransactionRollbackError);
    await expect(
      db.transaction(async (tx) => {
        await tx.execute(sql`INSERT INTO ${sql.raw(orders)} (id) VALUES (${'thrown'})`);
        await outbox.append(event('thrown'), { tx });
        throw new Rollback();
      }),
    ).rejects.toBeInstanceOf(Rollback);
    await app.get(OutboxDispatcher).drain();
    for (const id of ['rolled-back', 'thrown']) {
      expect(delivered()).not.toContain(id);
      expect(await eventCount(id)).toBe(0);
      expect((await pool.query(`SELECT 1 FROM ${orders} WHERE id = $1`, [id])).rows).toEqual([]);
    }
  });

  it('a nested transaction (savepoint) joins the outer one', async () => {
    await expect(
      db.transaction(async (tx) => {
        await tx.transaction((inner) => outbox.append(event('nested'), { tx: inner }));
        throw new Rollback();
      }),
    ).rejects.toBeInstanceOf(Rollback);
    expect(await eventCount('nested')).toBe(0);
  });

  it('refuses the root db, a pg PoolClient, the pool and a TypeORM EntityManager, naming tx', async () => {
    const asDb = await refusal(db, 'db');
    expect(asDb).toBeInstanceOf(OutboxValidationError);
    expect(asDb?.field).toBe('options.tx');
    expect(asDb?.message).toMatch(/Drizzle database \(db\), not a transaction.*db\.transaction/s);
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      expect((await refusal(client, 'client'))?.message).toMatch(
        /options\.tx.*pg PoolClient.*Drizzle's transaction.*pgExecutor/s,
      );
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect((await refusal(pool, 'pool'))?.message).toMatch(/options\.tx.*pg Pool/s);
    expect((await refusal({}, 'plain'))?.message).toMatch(
      /options\.tx.*not a Drizzle PostgreSQL transaction, got a plain object/s,
    );
    const ds = await openDataSource('postgres');
    try {
      const asManager = await ds.transaction((manager) => refusal(manager, 'orm'));
      expect(asManager?.message).toMatch(/TypeORM EntityManager.*Drizzle.*db\.transaction/s);
    } finally {
      await ds.destroy();
    }
    for (const id of ['db', 'client', 'pool', 'plain', 'orm']) expect(await eventCount(id)).toBe(0);
  });

  it('refuses a tx whose transaction has ended, and one that already failed', async () => {
    let escaped: unknown;
    await db.transaction(async (tx) => {
      escaped = tx;
    });
    const ended = await refusal(escaped, 'ended');
    expect(ended?.field).toBe('options.tx');
    expect(ended?.message).toMatch(/not inside an open transaction/);
    const failed = await db
      .transaction(async (tx) => {
        await tx.execute(sql`SELECT 1/0`).catch(() => undefined);
        const error = await refusal(tx, 'failed');
        throw error;
      })
      .catch((e: unknown) => e as OutboxValidationError);
    expect(failed).toBeInstanceOf(OutboxValidationError);
    expect(failed?.message).toMatch(/options\.tx.*failed transaction/s);
    expect(await eventCount('ended')).toBe(0);
    expect(await eventCount('failed')).toBe(0);
  });

  it('refuses a transaction of another Drizzle database', async () => {
    const other = openPool(1);
    try {
      const error = await drizzle({ client: other }).transaction((tx) => refusal(tx, 'stranger'));
      expect(error?.message).toMatch(/options\.tx.*another Drizzle database/s);
    } finally {
      await other.end();
    }
    expect(await eventCount('stranger')).toBe(0);
  });

  it('without tx, commits the event in its own transaction', async () => {
    await outbox.append(event('own'));
    expect(await until(() => delivered().includes('own'))).toBe(true);
  });
});

describe('drizzleExecutor(db)', () => {
  it('refuses what is not a Drizzle PostgreSQL database over a pg Pool', async () => {
    const pool = openPool(1);
    try {
      const db = drizzle({ client: pool });
      expect(() => drizzleExecutor(pool)).toThrow(OutboxOptionsError);
      expect(() => drizzleExecutor(pool)).toThrow(
        /store\.executor.*drizzleExecutor\(db\).*pg Pool/s,
      );
      expect(() => drizzleExecutor(drizzle.mock())).toThrow(/single connection/);
      expect(() => drizzleExecutor(drizzle({ client: new Client() }))).toThrow(
        /store\.executor.*over an instance of Client.*single connection/s,
      );
      expect(drizzleExecutor(db)).toMatchObject({ client: 'Drizzle', txOption: 'tx' });
      expect(drizzleExecutor(db).listenerConnection?.()).toMatchObject({
        config: expect.objectContaining({ database: expect.any(String) }),
      });
    } finally {
      await pool.end();
    }
  });

  it('refuses Drizzle’s tx as the executor’s database', async () => {
    const pool = openPool(1);
    try {
      const error = await drizzle({ client: pool })
        .transaction(async (tx) => {
          drizzleExecutor(tx);
        })
        .catch((e: unknown) => e);
      expect((error as Error).message).toMatch(/store\.executor.*got a Drizzle transaction/s);
    } finally {
      await pool.end();
    }
  });

  it('names drizzle-orm and its install command when it is not installed', () => {
    const script = `
      const Module = require('node:module');
      const resolveFilename = Module._resolveFilename;
      Module._resolveFilename = function (request, ...rest) {
        if (request === 'drizzle-orm' || request.startsWith('drizzle-orm/')) {
          throw Object.assign(new Error("Cannot find module '" + request + "'"), { code: 'MODULE_NOT_FOUND' });
        }
        return resolveFilename.call(this, request, ...rest);
      };
      const { drizzleExecutor } = require('./lib/index.ts');
      try { drizzleExecutor({}); console.log(JSON.stringify('accepted')); }
      catch (error) { console.log(JSON.stringify(error.message)); }
    `;
    const out = execFileSync(process.execPath, ['-r', TS_REGISTER, '-e', script], {
      cwd: resolve(__dirname, '..', '..', '..'),
      encoding: 'utf8',
      env: { ...process.env, TS_NODE_PROJECT: 'tsconfig.json' },
    });
    expect(JSON.parse(out.trim().split('\n').pop()!)).toBe(
      'The Drizzle executor (drizzleExecutor) needs the optional package "drizzle-orm", which is not installed. ' +
        'Install it with: npm install drizzle-orm',
    );
  });
});
