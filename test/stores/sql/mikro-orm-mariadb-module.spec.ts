import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { EntityManager, MikroORM } from '@mikro-orm/core';
import { MariaDbDriver } from '@mikro-orm/mariadb';
import { INestApplication, Injectable, Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import {
  mikroOrmExecutor,
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxService,
  OutboxValidationError,
} from 'nestjs-outbox';
import { describeWithService } from '../../support/services';
import { openDataSource, uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { mikroStoreFor, openMariaOrm, Order } from './mikro-orm-test-helpers';

/**
 * README "MikroORM" on MariaDB: `mikroOrmExecutor(orm)` over `@mikro-orm/mariadb`, and
 * `append(events, { tx: em })` with the EntityManager of `em.transactional(async (em) => …)`. The
 * event exists iff that transaction commits, with the entities MikroORM flushes at its end, and is
 * delivered once (by the poll: MariaDB has no wake-ups).
 */

@Injectable()
class Delivered {
  readonly ids: string[] = [];
  @OutboxHandler('order.placed')
  handle(event: OutboxEvent<{ id: string }>): void {
    this.ids.push(event.payload.id);
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

describeWithService('mariadb', 'sql store through mikroOrmExecutor on MariaDB, in an app', () => {
  const prefix = uniquePrefix('mkmm');
  let orm: MikroORM<MariaDbDriver>;
  let app: INestApplication;
  let outbox: OutboxService;
  const query = async (text: string, params: unknown[] = []) =>
    (await mikroOrmExecutor(orm).query({ text, params })).rows;
  beforeAll(async () => {
    orm = await openMariaOrm(prefix);
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
          dispatcher: { pollInterval: 100 },
          retention: { cleanupIntervalMs: 0 },
        }),
      ],
      providers: [Delivered],
    })
    class MikroMariaApp {}
    const moduleRef = await Test.createTestingModule({ imports: [MikroMariaApp] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    outbox = app.get(OutboxService);
  });
  afterAll(async () => {
    await app?.close();
    if (orm) await (await mikroStoreFor(orm, prefix)).drop();
    await orm?.close(true);
  });

  const delivered = () => app.get(Delivered).ids;
  const eventCount = async (id: string) =>
    Number(
      (await query(`SELECT count(*) AS n FROM ${prefix}events WHERE event_key = ?`, [id]))[0].n,
    );
  const orderExists = async (id: string) =>
    (await query(`SELECT 1 FROM ${prefix}orders WHERE id = ?`, [id])).length === 1;
  const refusal = (error: unknown, pattern: RegExp) => {
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).field).toBe('options.tx');
    expect((error as Error).message).toMatch(pattern);
  };

  it('em.transactional committed: the flushed entity and the event both exist; delivered once', async () => {
    await orm.em.transactional(async (em) => {
      em.persist(new Order('committed'));
      await outbox.append(order('committed'), { tx: em });
    });
    expect(await until(() => delivered().includes('committed'))).toBe(true);
    await app.get(OutboxDispatcher).drain();
    expect(delivered().filter((id) => id === 'committed')).toHaveLength(1);
    expect(await eventCount('committed')).toBe(1);
    expect(await orderExists('committed')).toBe(true);
  });

  it('em.transactional that throws: neither the entity nor the event exists; nothing is delivered', async () => {
    const error = await orm.em
      .transactional(async (em) => {
        em.persist(new Order('rolled-back'));
        await outbox.append(order('rolled-back'), { tx: em });
        await em.flush();
        throw new Error('business rule');
      })
      .catch((e: unknown) => e);
    expect((error as Error).message).toBe('business rule');
    await app.get(OutboxDispatcher).drain();
    expect(delivered()).not.toContain('rolled-back');
    expect(await eventCount('rolled-back')).toBe(0);
    expect(await orderExists('rolled-back')).toBe(false);
  });

  it('refuses the global em outside a transaction, an ended transaction, a TypeORM EntityManager', async () => {
    refusal(
      await outbox.append(order('root'), { tx: orm.em }).catch((e: unknown) => e),
      /MikroORM EntityManager outside any transaction.*em\.transactional/s,
    );
    let kept: EntityManager | undefined;
    await orm.em.transactional(async (em) => {
      kept = em;
    });
    refusal(
      await outbox.append(order('ended'), { tx: kept }).catch((e: unknown) => e),
      /already committed or rolled back/,
    );
    const ds = await openDataSource('mariadb');
    try {
      const asTx = await ds
        .transaction((manager) => outbox.append(order('orm'), { tx: manager }))
        .catch((e: unknown) => e);
      refusal(asTx, /TypeORM EntityManager.*MikroORM/s);
    } finally {
      await ds.destroy();
    }
    for (const id of ['root', 'ended', 'orm']) expect(await eventCount(id)).toBe(0);
  });

  it('without tx, commits the event in its own transaction', async () => {
    await outbox.append(order('own'));
    expect(await until(() => delivered().includes('own'))).toBe(true);
  });
});

describeWithService('mariadb', 'mikroOrmExecutor on MariaDB: its own parts', () => {
  const prefix = uniquePrefix('mkme');
  let orm: MikroORM<MariaDbDriver>;
  let tables: Awaited<ReturnType<typeof mikroStoreFor>>;
  beforeAll(async () => {
    orm = await openMariaOrm(prefix, 3);
    tables = await mikroStoreFor(orm, prefix);
  });
  afterAll(async () => {
    await tables?.drop();
    await orm?.close(true);
  });

  it('clientTransaction: tx is the forked EntityManager; its flush and the statements commit or roll back together', async () => {
    const executor = mikroOrmExecutor(orm);
    const count = async (id: string) =>
      (
        await executor.query({
          text: `SELECT id FROM ${prefix}orders WHERE id IN (?, ?)`,
          params: [id, `${id}-raw`],
        })
      ).rows.length;
    const write = async (tx: unknown, connection: { query: typeof executor.query }, id: string) => {
      expect(tx).toBeInstanceOf(EntityManager);
      expect(tx).not.toBe(orm.em);
      (tx as EntityManager).persist(new Order(id));
      const insert = { text: `INSERT INTO ${prefix}orders (id) VALUES (?)`, params: [`${id}-raw`] };
      expect((await connection.query(insert)).affected).toBe(1);
    };
    const error = await executor
      .clientTransaction(async (tx, connection) => {
        await write(tx, connection, 'ct-rb');
        throw new Error('rollback');
      })
      .catch((e: unknown) => e);
    expect((error as Error).message).toBe('rollback');
    expect(await count('ct-rb')).toBe(0);
    await executor.clientTransaction((tx, connection) => write(tx, connection, 'ct'), {
      isolation: 'READ COMMITTED',
    });
    expect(await count('ct')).toBe(2);
  });

  it('ownsClient: the MikroORM instance, its em and its forks; not another value', () => {
    const executor = mikroOrmExecutor(orm);
    expect(executor.ownsClient(orm)).toBe(true);
    expect(executor.ownsClient(orm.em)).toBe(true);
    expect(executor.ownsClient(orm.em.fork())).toBe(true);
    expect(executor.ownsClient({})).toBe(false);
    expect(executor.dialect).toBe('mysql');
  });

  it('reads rows as mysql2Executor does: dates as Date, BIGINT as number, JSON as text', async () => {
    const [row] = (
      await mikroOrmExecutor(orm).query({
        text: `SELECT CAST('2026-01-02 03:04:05.678' AS DATETIME(3)) AS at, CAST(42 AS SIGNED) AS n, JSON_OBJECT('a', 1) AS j, CAST(1.5 AS DECIMAL(4,2)) AS d`,
        params: [],
      })
    ).rows;
    expect(row.at).toBeInstanceOf(Date);
    expect(row.n).toBe(42);
    expect(typeof row.j).toBe('string');
    expect(row.d).toBe('1.50');
    expect(await mikroOrmExecutor(orm).serverFlavor!()).toBe('mariadb');
  });
});
