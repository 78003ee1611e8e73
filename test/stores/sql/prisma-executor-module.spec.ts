import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { ClsPluginTransactional, Transactional } from '@nestjs-cls/transactional';
import { TransactionalAdapterPrisma } from '@nestjs-cls/transactional-adapter-prisma';
import { INestApplication, Injectable, Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { ClsModule } from 'nestjs-cls';
import { Pool } from 'pg';
import {
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxOptionsError,
  OutboxService,
  OutboxValidationError,
  prismaExecutor,
  SqlExecutor,
} from 'nestjs-outbox';
import { TS_REGISTER } from '../../support/child-process';
import { describeWithService } from '../../support/services';
import { openDataSource, uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { openPool, pgStoreFor } from './pg-test-helpers';
import { openPrisma, PrismaClient } from './prisma-test-helpers';

/**
 * docs/stores.md "Without TypeORM: Prisma": `store: { type: 'sql', executor: prismaExecutor(prisma) }` and
 * `append(events, { tx })` with the client of `prisma.$transaction(async (tx) => …)`, or inside a
 * `@Transactional()` method of `@nestjs-cls/transactional-adapter-prisma` without tx. The event
 * exists iff that transaction commits; it is delivered once, woken by the NOTIFY sent inside the
 * transaction (the poll is a minute here, so only the wake-up can deliver it in time).
 */

const PRISMA = Symbol('PrismaClient');
const ORDERS = 't_prisma_exec_orders';

@Injectable()
class Delivered {
  readonly ids: string[] = [];
  @OutboxHandler('order.placed')
  handle(event: OutboxEvent<{ id: string }>): void {
    this.ids.push(event.payload.id);
  }
}

/** Writes through the ambient transaction (`@Transactional()`): no tx passed anywhere. */
@Injectable()
class Checkout {
  constructor(private readonly outbox: OutboxService) {}

  @Transactional()
  async place(id: string, total: number, fail = false): Promise<void> {
    await this.outbox.append({ type: 'order.placed', key: id, payload: { id } });
    if (fail) throw new Rollback();
    void total;
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

describeWithService('postgres', 'sql store through prismaExecutor, in an app', () => {
  const prefix = uniquePrefix('prm');
  let pool: Pool;
  let prisma: PrismaClient;
  let app: INestApplication;
  let outbox: OutboxService;

  beforeAll(async () => {
    pool = openPool();
    prisma = openPrisma();
    await pool.query(
      `CREATE TABLE IF NOT EXISTS ${ORDERS} (id serial PRIMARY KEY, total int NOT NULL)`,
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
          dispatcher: { pollInterval: 60_000 },
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
    // Let the wake-up listener start and be seen, so only a wake-up delivers within the tests.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
  });

  afterAll(async () => {
    await app?.close();
    await pool?.query(`DROP TABLE IF EXISTS ${ORDERS}`);
    await (await pgStoreFor(pool, prefix)).drop();
    await prisma?.$disconnect();
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

  it('a committed $transaction: the order and the event, delivered once, woken at commit', async () => {
    let seenBeforeCommit = -1;
    let stored: OutboxEvent | undefined;
    const order = await prisma.$transaction(async (tx) => {
      const created = await tx.order.create({ data: { total: 42 } });
      stored = await outbox.append(event('committed'), { tx });
      await new Promise((resolve) => setTimeout(resolve, 200));
      seenBeforeCommit = delivered().filter((id) => id === 'committed').length;
      return created;
    });
    expect(seenBeforeCommit).toBe(0);
    expect(stored).toMatchObject({ type: 'order.placed', key: 'committed' });
    expect(await prisma.order.findUnique({ where: { id: order.id } })).toEqual(order);
    expect(await until(() => delivered().includes('committed'))).toBe(true);
    await app.get(OutboxDispatcher).drain();
    expect(delivered().filter((id) => id === 'committed')).toHaveLength(1);
    expect(await eventCount('committed')).toBe(1);
  });

  it('a rolled-back $transaction: neither the order nor the event exists', async () => {
    let orderId = 0;
    await expect(
      prisma.$transaction(async (tx) => {
        orderId = (await tx.order.create({ data: { total: 7 } })).id;
        await outbox.append(event('rolled-back'), { tx });
        throw new Rollback();
      }),
    ).rejects.toBeInstanceOf(Rollback);
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
    await app.get(Checkout).place('ambient', 1);
    expect(await until(() => delivered().includes('ambient'))).toBe(true);
    await expect(app.get(Checkout).place('ambient-rollback', 1, true)).rejects.toBeInstanceOf(
      Rollback,
    );
    await app.get(OutboxDispatcher).drain();
    expect(delivered()).not.toContain('ambient-rollback');
    expect(await eventCount('ambient-rollback')).toBe(0);
  });

  it('refuses the PrismaClient itself, a pg Pool and a TypeORM EntityManager, naming tx', async () => {
    const asClient = await refusal(prisma, 'client');
    expect(asClient).toBeInstanceOf(OutboxValidationError);
    expect(asClient?.field).toBe('options.tx');
    expect(asClient?.message).toMatch(/PrismaClient itself, not a transaction.*\$transaction/s);
    expect((await refusal(prisma.$extends({}), 'extended'))?.message).toMatch(
      /PrismaClient itself/,
    );
    expect((await refusal(pool, 'pool'))?.message).toMatch(/options\.tx.*pg Pool.*prismaExecutor/s);
    expect((await refusal({}, 'plain'))?.message).toMatch(
      /options\.tx.*not a Prisma transaction client, got a plain object/s,
    );
    const ds = await openDataSource('postgres');
    try {
      const asManager = await ds.transaction((manager) => refusal(manager, 'orm'));
      expect(asManager?.message).toMatch(/TypeORM EntityManager.*Prisma.*\$transaction/s);
    } finally {
      await ds.destroy();
    }
    for (const id of ['client', 'extended', 'pool', 'plain', 'orm']) {
      expect(await eventCount(id)).toBe(0);
    }
  });

  it('refuses a tx whose transaction has ended, and one that already failed', async () => {
    let escaped: unknown;
    await prisma.$transaction(async (tx) => {
      escaped = tx;
    });
    const ended = await refusal(escaped, 'ended');
    expect(ended?.field).toBe('options.tx');
    expect(ended?.message).toMatch(/not inside an open transaction/);
    const failed = await prisma
      .$transaction(async (tx) => {
        await tx.$queryRawUnsafe('SELECT 1/0').catch(() => undefined);
        throw await refusal(tx, 'failed');
      })
      .catch((e: unknown) => e as OutboxValidationError);
    expect(failed).toBeInstanceOf(OutboxValidationError);
    expect(failed?.message).toMatch(/options\.tx.*failed transaction/s);
    expect(await eventCount('ended')).toBe(0);
    expect(await eventCount('failed')).toBe(0);
  });

  it('refuses a transaction of another PrismaClient', async () => {
    const other = openPrisma();
    try {
      const error = await other.$transaction((tx) => refusal(tx, 'stranger'));
      expect(error?.message).toMatch(/options\.tx.*another PrismaClient/s);
    } finally {
      await other.$disconnect();
    }
    expect(await eventCount('stranger')).toBe(0);
  });

  it('surfaces the SQLSTATE of a failed statement in the caller’s transaction', async () => {
    const executor = prismaExecutor(prisma);
    const error = await prisma
      .$transaction(async (tx) => {
        const { connection } = await executor.transactionOf(tx);
        await connection.query({
          text: `INSERT INTO ${ORDERS} (id, total) VALUES (1, 1), (1, 1)`,
          params: [],
        });
      })
      .catch((e: unknown) => e as { driverError?: { code?: string } });
    expect(error?.driverError?.code).toBe('23505');
  });

  it('without tx, commits the event in its own transaction', async () => {
    await outbox.append(event('own'));
    expect(await until(() => delivered().includes('own'))).toBe(true);
  });
});

describe('prismaExecutor(prisma)', () => {
  const executorOf = (prisma: PrismaClient): SqlExecutor => prismaExecutor(prisma);

  it('refuses what is not a PrismaClient over @prisma/adapter-pg, and a transaction client', async () => {
    const pool = openPool(1);
    const prisma = openPrisma(pool);
    try {
      expect(() => prismaExecutor(pool)).toThrow(OutboxOptionsError);
      expect(() => prismaExecutor(pool)).toThrow(
        /store\.executor.*prismaExecutor\(prisma\).*PrismaPg/s,
      );
      const error = await prisma
        .$transaction(async (tx) => {
          prismaExecutor(tx);
        })
        .catch((e: unknown) => e);
      expect((error as Error).message).toMatch(/store\.executor.*interactive transaction \(tx\)/s);
      const executor = executorOf(prisma);
      expect(executor).toMatchObject({ client: 'Prisma', txOption: 'tx', dialect: 'postgres' });
      expect(executor.listenerConnection?.()).toMatchObject({
        config: expect.objectContaining({ database: expect.any(String) }),
      });
      expect(executor.ownsClient?.(prisma)).toBe(true);
      expect(executor.ownsClient?.(prisma.$extends({}))).toBe(true);
      expect(executor.ownsClient?.(openPrisma(pool))).toBe(false);
    } finally {
      await prisma.$disconnect();
      await pool.end();
    }
  });

  it('clientTransaction: the app’s writes through tx and the store’s commit or roll back together', async () => {
    const prisma = openPrisma();
    const executor = executorOf(prisma);
    const pool = openPool(1);
    try {
      await pool.query(
        `CREATE TABLE IF NOT EXISTS ${ORDERS} (id serial PRIMARY KEY, total int NOT NULL)`,
      );
      const total = 918_273;
      await expect(
        executor.clientTransaction!(async (tx, connection) => {
          await (tx as PrismaClient).order.create({ data: { total } });
          await connection.query({
            text: `INSERT INTO ${ORDERS} (total) VALUES ($1)`,
            params: [total],
          });
          throw new Rollback();
        }),
      ).rejects.toBeInstanceOf(Rollback);
      const count = async () =>
        Number(
          (await pool.query(`SELECT count(*) AS n FROM ${ORDERS} WHERE total = $1`, [total]))
            .rows[0].n,
        );
      expect(await count()).toBe(0);
      const seq = await executor.clientTransaction!(
        async (tx, connection) => {
          await (tx as PrismaClient).order.create({ data: { total } });
          const { rows } = await connection.query({
            text: `SELECT count(*) AS n, 1.5::numeric AS d, current_setting('transaction_isolation') AS level FROM ${ORDERS} WHERE total = $1`,
            params: [total],
          });
          return rows[0];
        },
        { isolation: 'SERIALIZABLE' },
      );
      // pg's shapes: a bigint count and a numeric are strings.
      expect(seq).toEqual({ n: '1', d: '1.5', level: 'serializable' });
      expect(await count()).toBe(1);
      await pool.query(`DELETE FROM ${ORDERS} WHERE total = $1`, [total]);
    } finally {
      await prisma.$disconnect();
      await pool.end();
    }
  });

  it('names @prisma/adapter-pg and its install command when it is not installed', () => {
    const script = `
      const Module = require('node:module');
      const resolveFilename = Module._resolveFilename;
      Module._resolveFilename = function (request, ...rest) {
        if (request === '@prisma/adapter-pg') {
          throw Object.assign(new Error("Cannot find module '" + request + "'"), { code: 'MODULE_NOT_FOUND' });
        }
        return resolveFilename.call(this, request, ...rest);
      };
      const { prismaExecutor } = require('./lib/index.ts');
      try { prismaExecutor({}); console.log(JSON.stringify('accepted')); }
      catch (error) { console.log(JSON.stringify(error.message)); }
    `;
    const out = execFileSync(process.execPath, ['-r', TS_REGISTER, '-e', script], {
      cwd: resolve(__dirname, '..', '..', '..'),
      encoding: 'utf8',
      env: { ...process.env, TS_NODE_PROJECT: 'tsconfig.json' },
    });
    expect(JSON.parse(out.trim().split('\n').pop()!)).toMatch(
      /The Prisma executor \(prismaExecutor\) needs the optional package "@prisma\/adapter-pg".*npm install @prisma\/adapter-pg/s,
    );
  });
});
