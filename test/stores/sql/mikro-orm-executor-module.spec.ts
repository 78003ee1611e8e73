import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { EntityManager, MikroORM } from '@mikro-orm/core';
import { MikroOrmModule } from '@mikro-orm/nestjs';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import { Inject, INestApplication, Injectable, Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import {
  mikroOrmExecutor,
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
import { describeWithService, SERVICES } from '../../support/services';
import { openDataSource, uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { openPool } from './pg-test-helpers';
import { mikroStoreFor, openOrm, Order, orderSchema } from './mikro-orm-test-helpers';

/**
 * docs/stores.md "Without TypeORM: MikroORM": `store: { type: 'sql', executor: mikroOrmExecutor(orm) }` and
 * `append(events, { tx: em })` with the EntityManager of `em.transactional(async (em) => …)`. The
 * event exists iff that transaction commits, together with the entities MikroORM flushes at its
 * end; it is delivered once, woken by the NOTIFY sent inside the transaction (the poll is a minute
 * here, so only the wake-up can deliver it in time).
 */

@Injectable()
class Delivered {
  readonly ids: string[] = [];
  @OutboxHandler('order.placed')
  handle(event: OutboxEvent<{ id: string }>): void {
    this.ids.push(event.payload.id);
  }
}

const ORM = Symbol('MikroORM');

/** The app's own service: writes an order through MikroORM and its event in one transaction. */
@Injectable()
class Checkout {
  constructor(
    private readonly outbox: OutboxService,
    @Inject(ORM)
    private readonly orm: MikroORM,
  ) {}

  place(id: string, fail = false): Promise<void> {
    return this.orm.em.transactional(async (em) => {
      em.persist(new Order(id));
      await this.outbox.append(order(id), { tx: em });
      if (fail) throw new Error('business rule');
    });
  }
}

const order = (id: string) => ({ type: 'order.placed', key: id, payload: { id } });

async function until(check: () => boolean | Promise<boolean>, ms = 5_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return check();
}

async function startApp(orm: MikroORM, prefix: string, poll: number) {
  @Module({
    imports: [
      ScheduleModule.forRoot(),
      OutboxModule.forRoot({
        store: {
          type: 'sql',
          executor: mikroOrmExecutor(orm),
          tablePrefix: prefix,
          ensureSchema: true,
        },
        dispatcher: { pollInterval: poll },
        retention: { cleanupIntervalMs: 0 },
      }),
    ],
    providers: [Delivered, Checkout, { provide: ORM, useValue: orm }],
  })
  class MikroApp {}
  const moduleRef = await Test.createTestingModule({ imports: [MikroApp] }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  await app.init();
  return app;
}

describeWithService('postgres', 'sql store through mikroOrmExecutor, in an app', () => {
  const prefix = uniquePrefix('mkm');
  let orm: MikroORM<PostgreSqlDriver>;
  let app: INestApplication;
  let outbox: OutboxService;
  const query = async (text: string, params: unknown[] = []) =>
    (await mikroOrmExecutor(orm).query({ text, params })).rows;

  beforeAll(async () => {
    orm = await openOrm(prefix);
    app = await startApp(orm, prefix, 60_000);
    outbox = app.get(OutboxService);
    const [classid, objid] = wakeupListenerLock(wakeupChannel(prefix, 'public'));
    const listening = await until(
      async () =>
        (
          await query(
            `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND classid = $1::oid AND objid = $2::oid`,
            [String(classid), String(objid)],
          )
        ).length > 0,
    );
    expect(listening).toBe(true);
    // Let the listener's second look pass, so only a wake-up can deliver what the tests commit.
    await new Promise((r) => setTimeout(r, WAKEUP_LISTENERS_TTL_MS + 400));
  });

  afterAll(async () => {
    await app?.close();
    if (orm) await (await mikroStoreFor(orm, prefix)).drop();
    await orm?.close(true);
  });

  const delivered = () => app.get(Delivered).ids;
  const eventCount = async (id: string) =>
    Number(
      (await query(`SELECT count(*) AS n FROM ${prefix}events WHERE event_key = $1`, [id]))[0].n,
    );
  const orderExists = async (id: string) =>
    (await query(`SELECT 1 FROM ${prefix}orders WHERE id = $1`, [id])).length === 1;
  const refusal = (error: unknown, pattern: RegExp) => {
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).field).toBe('options.tx');
    expect((error as Error).message).toMatch(pattern);
  };

  it('em.transactional committed: the flushed entity and the event both exist; delivered once, woken at commit', async () => {
    let seenBeforeCommit = -1;
    await orm.em.transactional(async (em) => {
      em.persist(new Order('committed'));
      await outbox.append(order('committed'), { tx: em });
      await new Promise((r) => setTimeout(r, 200));
      seenBeforeCommit = delivered().filter((id) => id === 'committed').length;
    });
    expect(seenBeforeCommit).toBe(0);
    expect(await until(() => delivered().includes('committed'))).toBe(true);
    await app.get(OutboxDispatcher).drain();
    expect(delivered().filter((id) => id === 'committed')).toHaveLength(1);
    expect(await eventCount('committed')).toBe(1);
    expect(await orderExists('committed')).toBe(true);
  });

  it('em.transactional that throws: neither the entity nor the event exists; nothing is delivered', async () => {
    const error = await app
      .get(Checkout)
      .place('rolled-back', true)
      .catch((e: unknown) => e);
    expect((error as Error).message).toBe('business rule');
    await app.get(OutboxDispatcher).drain();
    expect(delivered()).not.toContain('rolled-back');
    expect(await eventCount('rolled-back')).toBe(0);
    expect(await orderExists('rolled-back')).toBe(false);
    await app.get(Checkout).place('service');
    expect(await until(() => delivered().includes('service'))).toBe(true);
    expect(await orderExists('service')).toBe(true);
  });

  it('a fork after em.begin(): delivered once after commit; nothing after rollback; refused once ended', async () => {
    const fork = orm.em.fork();
    await fork.begin();
    fork.persist(new Order('begun'));
    await outbox.append(order('begun'), { tx: fork });
    await fork.commit();
    expect(await until(() => delivered().includes('begun'))).toBe(true);
    expect(await orderExists('begun')).toBe(true);

    const rolledBack = orm.em.fork();
    await rolledBack.begin();
    rolledBack.persist(new Order('begun-rb'));
    await outbox.append(order('begun-rb'), { tx: rolledBack });
    await rolledBack.rollback();
    await app.get(OutboxDispatcher).drain();
    expect(await eventCount('begun-rb')).toBe(0);
    expect(await orderExists('begun-rb')).toBe(false);
    refusal(
      await outbox.append(order('begun-after'), { tx: fork }).catch((e: unknown) => e),
      /outside any transaction/,
    );
  });

  it('a nested em.transactional (a savepoint): rolled back with it, committed with the outer one', async () => {
    await orm.em.transactional(async (em) => {
      await em
        .transactional(async (inner) => {
          await outbox.append(order('inner-rb'), { tx: inner });
          throw new Error('inner');
        })
        .catch(() => undefined);
      await em.transactional((inner) => outbox.append(order('inner'), { tx: inner }));
    });
    expect(await until(() => delivered().includes('inner'))).toBe(true);
    expect(await eventCount('inner-rb')).toBe(0);
  });

  it('the global em inside em.transactional resolves to its fork (MikroORM’s context): accepted', async () => {
    await orm.em.transactional(async () => {
      await outbox.append(order('global-in-tx'), { tx: orm.em });
    });
    expect(await until(() => delivered().includes('global-in-tx'))).toBe(true);
  });

  it('refuses the global em outside a transaction, the MikroORM instance, an ended and a failed transaction', async () => {
    refusal(
      await outbox.append(order('root'), { tx: orm.em }).catch((e: unknown) => e),
      /MikroORM EntityManager outside any transaction.*em\.transactional/s,
    );
    refusal(
      await outbox.append(order('root'), { tx: orm }).catch((e: unknown) => e),
      /MikroORM instance, not a transaction/,
    );
    let kept: EntityManager | undefined;
    await orm.em.transactional(async (em) => {
      kept = em;
    });
    refusal(
      await outbox.append(order('ended'), { tx: kept }).catch((e: unknown) => e),
      /already committed or rolled back/,
    );
    let failed: unknown;
    await orm.em
      .transactional(async (em) => {
        await em
          .getConnection()
          .execute('SELECT 1/0', [], 'all', em.getTransactionContext())
          .catch(() => undefined);
        failed = await outbox.append(order('failed'), { tx: em }).catch((e: unknown) => e);
      })
      .catch(() => undefined);
    refusal(failed, /failed transaction/);
    for (const id of ['root', 'ended', 'failed']) expect(await eventCount(id)).toBe(0);
  });

  it('refuses an EntityManager of another MikroORM, a pg client, a TypeORM EntityManager', async () => {
    const other = await openOrm(`${prefix}o_`, 1);
    try {
      const stranger = await other.em.transactional((em) =>
        outbox.append(order('stranger'), { tx: em }).catch((e: unknown) => e),
      );
      refusal(stranger, /another MikroORM instance/);
    } finally {
      await other.em.getConnection().execute(`DROP TABLE IF EXISTS ${prefix}o_orders`);
      await other.close(true);
    }
    const pool = openPool(1);
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      refusal(
        await outbox.append(order('pg'), { tx: client }).catch((e: unknown) => e),
        /not a MikroORM EntityManager.*em\.transactional/s,
      );
      await client.query('ROLLBACK');
    } finally {
      client.release();
      await pool.end();
    }
    const ds = await openDataSource('postgres');
    try {
      const asTx = await ds
        .transaction((manager) => outbox.append(order('orm'), { tx: manager }))
        .catch((e: unknown) => e);
      refusal(asTx, /TypeORM EntityManager.*MikroORM/s);
    } finally {
      await ds.destroy();
    }
    for (const id of ['stranger', 'pg', 'orm']) expect(await eventCount(id)).toBe(0);
  });

  it('without tx, commits the event in its own transaction', async () => {
    await outbox.append(order('own'));
    expect(await until(() => delivered().includes('own'))).toBe(true);
  });
});

describeWithService('postgres', 'mikroOrmExecutor: its own parts', () => {
  const prefix = uniquePrefix('mke');
  let orm: MikroORM<PostgreSqlDriver>;
  let tables: Awaited<ReturnType<typeof mikroStoreFor>>;

  beforeAll(async () => {
    orm = await openOrm(prefix, 3);
    tables = await mikroStoreFor(orm, prefix);
  });
  afterAll(async () => {
    await tables?.drop();
    await orm?.close(true);
  });

  it('clientTransaction: tx is the forked EntityManager; its flush and the statements commit or roll back together', async () => {
    const executor = mikroOrmExecutor(orm);
    const insert = (id: string) => ({
      text: `INSERT INTO ${prefix}orders (id) VALUES ($1)`,
      params: [`${id}-raw`],
    });
    const write = async (tx: unknown, connection: { query: typeof executor.query }, id: string) => {
      expect(tx).toBeInstanceOf(EntityManager);
      expect(tx).not.toBe(orm.em);
      (tx as EntityManager).persist(new Order(id));
      expect((await connection.query(insert(id))).affected).toBe(1);
    };
    const error = await executor.clientTransaction!(async (tx, connection) => {
      await write(tx, connection, 'ct-rb');
      throw new Error('rollback');
    }).catch((e: unknown) => e);
    expect((error as Error).message).toBe('rollback');
    await executor.clientTransaction!((tx, connection) => write(tx, connection, 'ct'), {
      isolation: 'SERIALIZABLE',
    });
    const ids = (
      await executor.query({ text: `SELECT id FROM ${prefix}orders ORDER BY id`, params: [] })
    ).rows.map((r) => r.id);
    expect(ids).toEqual(['ct', 'ct-raw']);
  });

  it('clientTransaction opens a transaction of its own even inside a caller’s em.transactional', async () => {
    const executor = mikroOrmExecutor(orm);
    await orm.em
      .transactional(async () => {
        await executor.clientTransaction!((_tx, connection) =>
          connection.query({
            text: `INSERT INTO ${prefix}orders (id) VALUES ('own-tx')`,
            params: [],
          }),
        );
        throw new Error('outer rolls back');
      })
      .catch(() => undefined);
    expect(
      (
        await executor.query({
          text: `SELECT 1 FROM ${prefix}orders WHERE id = 'own-tx'`,
          params: [],
        })
      ).rows,
    ).toHaveLength(1);
  });

  it('reads as node-postgres does: timestamps as Date, counts of written rows', async () => {
    const executor = mikroOrmExecutor(orm);
    const { rows } = await executor.query({
      text: `SELECT now() AS at, '2024-01-02'::date AS day, '{"a":1}'::jsonb AS doc`,
      params: [],
    });
    expect(rows[0].at).toBeInstanceOf(Date);
    expect(rows[0].doc).toEqual({ a: 1 });
    const written = await executor.query({
      text: `INSERT INTO ${prefix}orders (id) VALUES ('c1'), ('c2')`,
      params: [],
    });
    expect(written.affected).toBe(2);
  });

  it('rejects a failing statement with its SQLSTATE as code', async () => {
    const executor = mikroOrmExecutor(orm);
    const text = `INSERT INTO ${prefix}orders (id) VALUES ('dup')`;
    await executor.query({ text, params: [] });
    const error = await executor.query({ text, params: [] }).catch((e: unknown) => e);
    expect((error as { code?: string }).code).toBe('23505');
    const inTx = await executor
      .transaction((connection) => connection.query({ text, params: [] }))
      .catch((e: unknown) => e);
    expect((inTx as { code?: string }).code).toBe('23505');
  });

  it('a transaction whose connection died: the error is rethrown and the pool serves working connections', async () => {
    const executor = mikroOrmExecutor(orm);
    const error = await executor
      .transaction(async (connection) => {
        const { rows } = await connection.query({
          text: 'SELECT pg_backend_pid() AS pid',
          params: [],
        });
        await executor.query({ text: 'SELECT pg_terminate_backend($1)', params: [rows[0].pid] });
        throw new Error('after terminate');
      })
      .catch((e: unknown) => e);
    expect((error as Error).message).toBe('after terminate');
    for (let i = 0; i < 5; i++) {
      expect((await executor.query({ text: 'SELECT 1 AS one', params: [] })).rows).toEqual([
        { one: 1 },
      ]);
    }
  });

  it('ownsClient: the MikroORM instance and its EntityManagers, not another ORM’s', async () => {
    const executor = mikroOrmExecutor(orm);
    expect(executor.ownsClient!(orm)).toBe(true);
    expect(executor.ownsClient!(orm.em)).toBe(true);
    expect(executor.ownsClient!(orm.em.fork())).toBe(true);
    const other = await openOrm(`${prefix}o_`, 1);
    try {
      expect(executor.ownsClient!(other)).toBe(false);
      expect(executor.ownsClient!(other.em)).toBe(false);
      expect(executor.ownsClient!({})).toBe(false);
    } finally {
      await other.em.getConnection().execute(`DROP TABLE IF EXISTS ${prefix}o_orders`);
      await other.close(true);
    }
  });

  it('listenerConnection: a pg Client with MikroORM’s connection options', () => {
    const listener = mikroOrmExecutor(orm.em).listenerConnection!();
    expect(listener).not.toBeNull();
    expect(listener!.config).toMatchObject({ database: 'test', user: 'postgres' });
    expect(listener!.config).not.toHaveProperty('types');
    expect(typeof listener!.Client).toBe('function');
  });
});

describe('mikroOrmExecutor(orm) options', () => {
  it('refuses what is not a MikroORM instance or EntityManager', () => {
    expect(() => mikroOrmExecutor({ query() {} })).toThrow(OutboxOptionsError);
    expect(() => mikroOrmExecutor({ query() {} })).toThrow(/store\.executor.*MikroORM instance/s);
    expect(() => mikroOrmExecutor(undefined)).toThrow(/MikroORM instance/);
  });

  it('names the packages to install when MikroORM is missing', () => {
    const script = `
      const Module = require('node:module');
      const resolveFilename = Module._resolveFilename;
      Module._resolveFilename = function (request, ...rest) {
        if (request.startsWith('@mikro-orm/')) {
          throw Object.assign(new Error("Cannot find module '" + request + "'"), { code: 'MODULE_NOT_FOUND' });
        }
        return resolveFilename.call(this, request, ...rest);
      };
      require('reflect-metadata');
      const { mikroOrmExecutor } = require('./lib/index.ts');
      try { mikroOrmExecutor({}); console.log('no error'); } catch (e) { console.log(e.name + ': ' + e.message); }
    `;
    const out = execFileSync(process.execPath, ['-r', TS_REGISTER, '-e', script], {
      cwd: resolve(__dirname, '..', '..', '..'),
      encoding: 'utf8',
      env: { ...process.env, TS_NODE_PROJECT: 'tsconfig.json' },
    });
    expect(out.trim().split('\n').pop()).toMatch(
      /MissingDependencyError: .*mikroOrmExecutor.*@mikro-orm\/core.*@mikro-orm\/postgresql.*npm install/,
    );
  });
});

describeWithService(
  'postgres',
  'docs/stores.md "Without TypeORM: MikroORM": with @mikro-orm/nestjs',
  () => {
    const prefix = uniquePrefix('mkr');

    /** The AppModule of docs/stores.md, with the test database and a table of this test. */
    function readmeApp() {
      @Injectable()
      class Orders {
        constructor(
          private readonly orm: MikroORM,
          private readonly outbox: OutboxService,
        ) {}

        place(orderId: string, fail = false): Promise<void> {
          return this.orm.em.transactional(async (em) => {
            em.persist(new Order(orderId));
            await this.outbox.append(
              { type: 'order.placed', key: orderId, payload: { id: orderId } },
              { tx: em },
            );
            if (fail) throw new Error('business rule');
          });
        }
      }

      @Module({
        imports: [
          ScheduleModule.forRoot(),
          MikroOrmModule.forRoot({
            driver: PostgreSqlDriver,
            clientUrl: `postgresql://postgres@${SERVICES.postgres.host}:${SERVICES.postgres.port}/test`,
            entities: [orderSchema(prefix)],
          }),
          OutboxModule.forRootAsync({
            inject: [MikroORM],
            useFactory: (orm: MikroORM) => ({
              store: {
                type: 'sql',
                executor: mikroOrmExecutor(orm),
                tablePrefix: prefix,
                ensureSchema: true,
              },
              dispatcher: { pollInterval: 200 },
              retention: { cleanupIntervalMs: 0 },
            }),
          }),
        ],
        providers: [Orders, Delivered],
      })
      class AppModule {}
      return { AppModule, Orders };
    }

    it('a committed em.transactional delivers once with its entity; a rolled-back one nothing', async () => {
      const { AppModule, Orders } = readmeApp();
      const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
      const app = moduleRef.createNestApplication({ logger: false });
      await app.init();
      const orm = app.get(MikroORM);
      const executor = mikroOrmExecutor(orm);
      const rows = async (text: string) => (await executor.query({ text, params: [] })).rows;
      try {
        await rows(`CREATE TABLE ${prefix}orders (id text PRIMARY KEY)`);
        await app.get(Orders).place('kept');
        const error = await app
          .get(Orders)
          .place('dropped', true)
          .catch((e: unknown) => e);
        expect((error as Error).message).toBe('business rule');
        expect(await until(() => app.get(Delivered).ids.includes('kept'))).toBe(true);
        await app.get(OutboxDispatcher).drain();
        expect(app.get(Delivered).ids).toEqual(['kept']);
        expect(await rows(`SELECT id FROM ${prefix}orders`)).toEqual([{ id: 'kept' }]);
        expect(await rows(`SELECT event_key FROM ${prefix}events`)).toEqual([
          { event_key: 'kept' },
        ]);
      } finally {
        await (await mikroStoreFor(orm, prefix)).drop();
        await app.close();
      }
    });
  },
);
