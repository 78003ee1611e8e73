import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { INestApplication, Injectable, Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { CamelCasePlugin, Kysely } from 'kysely';
import { Pool as CallbackPool } from 'mysql2';
import { Pool } from 'mysql2/promise';
import {
  kyselyExecutor,
  InboxService,
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxService,
  OutboxValidationError,
} from 'nestjs-outbox';
import { describeWithService } from '../../support/services';
import { openDataSource, uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { openKyselyMysql } from './kysely-test-helpers';
import { mysql2StoreFor } from './mysql2-test-helpers';

/**
 * README "Kysely" on MariaDB: `kyselyExecutor(db, { pool })` with the mysql2 pool given to
 * `MysqlDialect`, and `append(events, { tx: trx })` inside `db.transaction().execute(…)`. The
 * event exists iff that transaction commits; the dispatcher's poll delivers it once.
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

describeWithService('mariadb', 'sql store through kyselyExecutor on MariaDB, in an app', () => {
  const prefix = uniquePrefix('kymm');
  const orders = `${prefix}orders`;
  let db: Kysely<any>;
  let pool: CallbackPool;
  let promisePool: Pool;
  let app: INestApplication;
  let outbox: OutboxService;

  beforeAll(async () => {
    ({ db, pool, promisePool } = openKyselyMysql());
    // The app's db renames columns (camelCase): the store's statements never go through it.
    db = db.withPlugin(new CamelCasePlugin());
    await promisePool.query(`CREATE TABLE ${orders} (id VARCHAR(64) PRIMARY KEY)`);
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: {
            type: 'sql',
            executor: kyselyExecutor(db, { pool }),
            tablePrefix: prefix,
            ensureSchema: true,
          },
          dispatcher: { pollInterval: 100 },
          retention: { cleanupIntervalMs: 0 },
          inbox: { cleanupIntervalMs: 0 },
        }),
      ],
      providers: [Delivered],
    })
    class KyselyMysqlApp {}
    const moduleRef = await Test.createTestingModule({ imports: [KyselyMysqlApp] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    outbox = app.get(OutboxService);
  });

  afterAll(async () => {
    await app?.close();
    await promisePool?.query(`DROP TABLE IF EXISTS ${orders}`);
    await promisePool?.query(`DROP TABLE IF EXISTS ${prefix}inbox`);
    if (promisePool) await (await mysql2StoreFor(promisePool, prefix)).drop();
    await db?.destroy();
  });

  const delivered = () => app.get(Delivered).ids;
  const eventCount = async (id: string) => {
    const [rows] = await promisePool.query(
      `SELECT count(*) AS n FROM ${prefix}events WHERE event_key = ?`,
      [id],
    );
    return Number((rows as Array<{ n: number }>)[0].n);
  };
  const order = (id: string) => ({ type: 'order.placed', key: id, payload: { id } });
  const place = async (trx: Kysely<any>, id: string) => {
    await trx.insertInto(orders).values({ id }).execute();
    await outbox.append(order(id), { tx: trx });
  };
  const refusal = (tx: unknown, key: string) =>
    outbox.append(order(key), { tx }).then(
      () => new Error('accepted'),
      (e: unknown) => e as Error,
    );

  it('a committed transaction: the event is delivered once, after the commit', async () => {
    let seenBeforeCommit = -1;
    await db.transaction().execute(async (trx) => {
      await place(trx, 'committed');
      await new Promise((resolve) => setTimeout(resolve, 300));
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
    const [rows] = await promisePool.query(`SELECT 1 FROM ${orders} WHERE id = 'rolled-back'`);
    expect(rows).toEqual([]);
  });

  it('a controlled transaction (startTransaction): delivered once after commit', async () => {
    const trx = await db.startTransaction().execute();
    await place(trx, 'controlled');
    await trx.commit().execute();
    expect(await until(() => delivered().includes('controlled'))).toBe(true);
    expect((await refusal(trx, 'after-commit')).message).toMatch(/already committed/);
  });

  it('refuses the root db, an ended transaction, another db’s, and writes nothing', async () => {
    const root = await refusal(db, 'root');
    expect(root).toBeInstanceOf(OutboxValidationError);
    expect((root as OutboxValidationError).field).toBe('options.tx');
    expect(root.message).toMatch(/outside any transaction/);
    let ended: unknown;
    await db.transaction().execute(async (trx) => {
      ended = trx;
    });
    expect((await refusal(ended, 'ended')).message).toMatch(/already committed or rolled back/);
    const other = openKyselyMysql(1);
    try {
      const stranger = await other.db.transaction().execute((trx) => refusal(trx, 'stranger'));
      expect(stranger.message).toMatch(/options\.tx.*another Kysely instance/s);
    } finally {
      await other.db.destroy();
    }
    for (const key of ['root', 'ended', 'stranger']) expect(await eventCount(key)).toBe(0);
  });

  it('refuses a TypeORM EntityManager as tx, naming what to pass', async () => {
    const ds = await openDataSource('mariadb');
    try {
      const asTx = await ds.transaction((manager) => refusal(manager, 'orm'));
      expect((asTx as OutboxValidationError).field).toBe('options.tx');
      expect(asTx.message).toMatch(/TypeORM EntityManager.*Kysely.*db\.transaction\(\)/s);
    } finally {
      await ds.destroy();
    }
    expect(await eventCount('orm')).toBe(0);
  });

  it('without tx, commits the event in its own transaction', async () => {
    await outbox.append(order('own'));
    expect(await until(() => delivered().includes('own'))).toBe(true);
  });

  it('InboxService.run: the work runs in a Kysely Transaction, once per message, with its append', async () => {
    const inbox = app.get(InboxService);
    const work =
      (id: string, fail = false) =>
      async (trx: Kysely<any>, client: string) => {
        expect(client).toBe('Kysely');
        await trx.insertInto(orders).values({ id }).execute();
        await outbox.append(order(id), { tx: trx });
        if (fail) throw new Error('after the write');
      };
    const key = { consumer: 'kymm-orders', messageId: 'm-1' };
    expect((await inbox.run(key, work('inbox-1'))).duplicate).toBe(false);
    expect((await inbox.run(key, work('inbox-1'))).duplicate).toBe(true);
    expect(await eventCount('inbox-1')).toBe(1);
    const failing = { consumer: 'kymm-orders', messageId: 'm-2' };
    await expect(inbox.run(failing, work('inbox-2', true))).rejects.toThrow('after the write');
    expect(await eventCount('inbox-2')).toBe(0);
    const [rows] = await promisePool.query(`SELECT 1 FROM ${orders} WHERE id = 'inbox-2'`);
    expect(rows).toEqual([]);
    expect((await inbox.run(failing, work('inbox-2'))).duplicate).toBe(false);
    expect(await eventCount('inbox-2')).toBe(1);
  });
});
