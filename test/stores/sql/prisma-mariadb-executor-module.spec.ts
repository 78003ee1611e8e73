import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { ClsPluginTransactional, Transactional } from '@nestjs-cls/transactional';
import { TransactionalAdapterPrisma } from '@nestjs-cls/transactional-adapter-prisma';
import { INestApplication, Injectable, Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import type { Pool } from 'mysql2/promise';
import { ClsModule } from 'nestjs-cls';
import {
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxService,
  OutboxValidationError,
  prismaExecutor,
} from 'nestjs-outbox';
import { exitTime, forkFixture } from '../../support/child-process';
import { describeWithService } from '../../support/services';
import { openDataSource, uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { mysql2StoreFor, openMysqlPool } from './mysql2-test-helpers';
import { openPrismaMariaDb, PrismaClient } from './prisma-mariadb-test-helpers';

/**
 * README "Without TypeORM: Prisma" on MariaDB: `prismaExecutor(prisma)` with `new
 * PrismaMariaDb(…)`, and `append(events, { tx })` with the client of `prisma.$transaction(async
 * (tx) => …)`, or inside a `@Transactional()` method without tx. The event exists iff that
 * transaction commits; the dispatcher's poll delivers it once.
 */

const PRISMA = Symbol('PrismaClient');
const ORDERS = 't_prisma_maria_orders';

@Injectable()
class Delivered {
  readonly ids: string[] = [];
  @OutboxHandler('order.placed')
  handle(event: OutboxEvent<{ id: string }>): void {
    this.ids.push(event.payload.id);
  }
}

class Rollback extends Error {}

/** Writes through the ambient transaction (`@Transactional()`): no tx passed anywhere. */
@Injectable()
class Checkout {
  constructor(private readonly outbox: OutboxService) {}

  @Transactional()
  async place(id: string, fail = false): Promise<void> {
    await this.outbox.append({ type: 'order.placed', key: id, payload: { id } });
    if (fail) throw new Rollback();
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

describeWithService('mariadb', 'sql store through prismaExecutor on MariaDB, in an app', () => {
  const prefix = uniquePrefix('pmaria_m');
  let pool: Pool;
  let prisma: PrismaClient;
  let app: INestApplication;
  let outbox: OutboxService;

  beforeAll(async () => {
    pool = openMysqlPool(2);
    prisma = openPrismaMariaDb();
    await pool.query(
      `CREATE TABLE IF NOT EXISTS ${ORDERS} (id INT AUTO_INCREMENT PRIMARY KEY, total INT NOT NULL)`,
    );
    @Module({ providers: [{ provide: PRISMA, useValue: prisma }], exports: [PRISMA] })
    class PrismaModule {}
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        ClsModule.forRoot({
          global: true,
          plugins: [
            new ClsPluginTransactional({
              imports: [PrismaModule],
              adapter: new TransactionalAdapterPrisma({ prismaInjectionToken: PRISMA }),
            }),
          ],
        }),
        OutboxModule.forRoot({
          store: {
            type: 'sql',
            executor: prismaExecutor(prisma),
            tablePrefix: prefix,
            ensureSchema: true,
          },
          dispatcher: { pollInterval: 100 },
          retention: { cleanupIntervalMs: 0 },
        }),
      ],
      providers: [Delivered, Checkout],
    })
    class PrismaApp {}
    const moduleRef = await Test.createTestingModule({ imports: [PrismaApp] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    outbox = app.get(OutboxService);
  });

  afterAll(async () => {
    await app?.close();
    await pool?.query(`DROP TABLE IF EXISTS ${ORDERS}`);
    if (pool) await (await mysql2StoreFor(pool, prefix)).drop();
    await prisma?.$disconnect();
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
  const event = (id: string) => ({ type: 'order.placed', key: id, payload: { id } });
  const refusal = (tx: unknown, id: string) =>
    outbox.append(event(id), { tx }).then(
      () => undefined,
      (e: unknown) => e as OutboxValidationError,
    );

  it('a committed $transaction: the order and the event, delivered once, after the commit', async () => {
    let seenBeforeCommit = -1;
    const order = await prisma.$transaction(async (tx) => {
      const created = await tx.order.create({ data: { total: 42 } });
      await outbox.append(event('committed'), { tx });
      await new Promise((resolve) => setTimeout(resolve, 300));
      seenBeforeCommit = delivered().filter((id) => id === 'committed').length;
      return created;
    });
    expect(seenBeforeCommit).toBe(0);
    expect(await prisma.order.findUnique({ where: { id: order.id } })).toEqual(order);
    expect(await until(() => delivered().includes('committed'))).toBe(true);
    await app.get(OutboxDispatcher).drain();
    expect(delivered().filter((id) => id === 'committed')).toHaveLength(1);
    expect(await eventCount('committed')).toBe(1);
  });

  it('a $transaction that throws: neither the order nor the event exists', async () => {
    let orderId = 0;
    await expect(
      prisma.$transaction(async (tx) => {
        orderId = (await tx.order.create({ data: { total: 7 } })).id;
        await outbox.append(event('rolled-back'), { tx });
        throw new Rollback();
      }),
    ).rejects.toBeInstanceOf(Rollback);
    await new Promise((resolve) => setTimeout(resolve, 300));
    await app.get(OutboxDispatcher).drain();
    expect(delivered()).not.toContain('rolled-back');
    expect(await eventCount('rolled-back')).toBe(0);
    expect(await prisma.order.findUnique({ where: { id: orderId } })).toBeNull();
  });

  it('the same event id appended twice in one transaction is stored once', async () => {
    const id = randomUUID();
    const [first, second] = await prisma.$transaction(async (tx) => [
      await outbox.append({ ...event('twice'), id }, { tx }),
      await outbox.append({ ...event('twice'), id }, { tx }),
    ]);
    expect(second.id).toBe(first.id);
    expect(await eventCount('twice')).toBe(1);
  });

  it('@Transactional() of the Prisma adapter: append without tx joins it', async () => {
    await app.get(Checkout).place('ambient');
    expect(await until(() => delivered().includes('ambient'))).toBe(true);
    await expect(app.get(Checkout).place('ambient-rollback', true)).rejects.toBeInstanceOf(
      Rollback,
    );
    expect(await eventCount('ambient-rollback')).toBe(0);
  });

  it('refuses the PrismaClient itself, a finished tx, a plain object and a TypeORM EntityManager, naming tx', async () => {
    const asClient = await refusal(prisma, 'client');
    expect(asClient).toBeInstanceOf(OutboxValidationError);
    expect(asClient?.field).toBe('options.tx');
    expect(asClient?.message).toMatch(/PrismaClient itself, not a transaction.*\$transaction/s);
    expect((await refusal(prisma.$extends({}), 'extended'))?.message).toMatch(
      /PrismaClient itself/,
    );
    let escaped: unknown;
    await prisma.$transaction(async (tx) => {
      escaped = tx;
    });
    expect((await refusal(escaped, 'ended'))?.message).toMatch(
      /options\.tx.*not inside an open transaction/s,
    );
    expect((await refusal({}, 'plain'))?.message).toMatch(
      /options\.tx.*not a Prisma transaction client, got a plain object/s,
    );
    const ds = await openDataSource('mariadb');
    try {
      const asManager = await ds.transaction((manager) => refusal(manager, 'orm'));
      expect(asManager?.message).toMatch(/TypeORM EntityManager.*Prisma.*\$transaction/s);
    } finally {
      await ds.destroy();
    }
    for (const id of ['client', 'extended', 'ended', 'plain', 'orm']) {
      expect(await eventCount(id)).toBe(0);
    }
  });

  it('refuses a transaction of another PrismaClient', async () => {
    const other = openPrismaMariaDb();
    try {
      const error = await other.$transaction((tx) => refusal(tx, 'stranger'));
      expect(error?.message).toMatch(/options\.tx.*another PrismaClient/s);
    } finally {
      await other.$disconnect();
    }
    expect(await eventCount('stranger')).toBe(0);
  });

  it('surfaces the errno of a failed statement in the caller’s transaction', async () => {
    const executor = prismaExecutor(prisma);
    const error = await prisma
      .$transaction(async (tx) => {
        const { connection } = await executor.transactionOf(tx);
        await connection.query({
          text: `INSERT INTO ${ORDERS} (id, total) VALUES (1, 1), (1, 1)`,
          params: [],
        });
      })
      .catch((e: unknown) => e as { driverError?: { errno?: number } });
    expect(error?.driverError?.errno).toBe(1062);
  });

  it('without tx, commits the event in its own transaction', async () => {
    await outbox.append(event('own'));
    expect(await until(() => delivered().includes('own'))).toBe(true);
  });
});

describe('prismaExecutor(prisma) over @prisma/adapter-mariadb', () => {
  it('is a MariaDB executor; clientTransaction: the app’s writes and the store’s commit or roll back together', async () => {
    const prisma = openPrismaMariaDb();
    const executor = prismaExecutor(prisma);
    const pool = openMysqlPool(1);
    const table = `${uniquePrefix('pmaria_x')}orders`;
    try {
      expect(executor).toMatchObject({ client: 'Prisma', txOption: 'tx', dialect: 'mysql' });
      expect(await executor.serverFlavor?.()).toBe('mariadb');
      expect(executor.ownsClient(prisma)).toBe(true);
      expect(executor.ownsClient(prisma.$extends({}))).toBe(true);
      expect(executor.ownsClient(openPrismaMariaDb())).toBe(false);
      await pool.query(`CREATE TABLE ${table} (id INT AUTO_INCREMENT PRIMARY KEY, total INT)`);
      const total = 918_273;
      await expect(
        executor.clientTransaction(async (_tx, connection) => {
          await connection.query({
            text: `INSERT INTO ${table} (total) VALUES (?)`,
            params: [total],
          });
          throw new Rollback();
        }),
      ).rejects.toBeInstanceOf(Rollback);
      const read = await executor.clientTransaction(
        async (tx, connection) => {
          await (tx as PrismaClient).$executeRawUnsafe(
            `INSERT INTO ${table} (total) VALUES (?)`,
            total,
          );
          const { rows } = await connection.query({
            text: `SELECT count(*) AS n, CAST(1.5 AS DECIMAL(4,2)) AS d FROM ${table} WHERE total = ?`,
            params: [total],
          });
          return rows[0];
        },
        { isolation: 'SERIALIZABLE' },
      );
      // mysql2's shapes: a count (Prisma's BigInt) is a number, a DECIMAL a string.
      expect(read).toEqual({ n: 1, d: '1.5' });
      // The executor's own pool: the same shapes.
      expect(
        (await executor.query({ text: `SELECT count(*) AS n FROM ${table}`, params: [] })).rows,
      ).toEqual([{ n: 1 }]);
    } finally {
      await pool.query(`DROP TABLE IF EXISTS ${table}`);
      await prisma.$disconnect();
      await pool.end();
    }
  });

  it('ends its own pool once idle, and opens another on the next statement', async () => {
    const prisma = openPrismaMariaDb();
    const factory = (
      prisma as unknown as { _engineConfig: { adapter: { connect(): Promise<any> } } }
    )._engineConfig.adapter;
    const disposed: number[] = [];
    const connect = factory.connect.bind(factory);
    let opened = 0;
    factory.connect = async () => {
      const adapter = await connect();
      const n = ++opened;
      const dispose = adapter.dispose.bind(adapter);
      adapter.dispose = () => (disposed.push(n), dispose());
      return adapter;
    };
    const executor = prismaExecutor(prisma);
    try {
      await executor.query({ text: 'SELECT 1', params: [] });
      await executor.query({ text: 'SELECT 1', params: [] });
      expect(opened).toBe(1);
      expect(await until(() => disposed.length === 1, 8_000)).toBe(true);
      expect(disposed).toEqual([1]);
      await executor.query({ text: 'SELECT 1', params: [] });
      expect(opened).toBe(2);
      expect(await until(() => disposed.length === 2, 8_000)).toBe(true);
    } finally {
      await prisma.$disconnect();
    }
  }, 30_000);

  it.each(['outbox', 'inbox'])(
    'ends its own pool when the app closes (%s): the process exits at once, not when the pool idles out',
    async (mode) => {
      const prefix = uniquePrefix('pmaria_exit');
      const child = forkFixture(join(__dirname, 'fixtures', 'prisma-mariadb-exit.ts'), {
        EXIT_PREFIX: prefix,
        EXIT_MODE: mode,
      });
      const pool = openMysqlPool(1);
      try {
        const { closed } = await child.next<{ closed: number }>();
        const gone = await exitTime(child, 10_000);
        // The idle end of the executor's pool comes 5 s after its last statement.
        expect(gone === null ? 'still running after 10 s' : gone - closed).toBeLessThan(2_500);
        expect(await child.exited).toEqual({ code: 0, signal: null });
      } finally {
        await child.kill();
        await (await mysql2StoreFor(pool, prefix)).drop();
        await pool.end();
      }
    },
    60_000,
  );
});
