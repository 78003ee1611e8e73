import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { INestApplication, Injectable, Module } from '@nestjs/common';
import { ClsPluginTransactional, Transactional, TransactionHost } from '@nestjs-cls/transactional';
import { TransactionalAdapterDrizzleOrm } from '@nestjs-cls/transactional-adapter-drizzle-orm';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { sql } from 'drizzle-orm';
import { drizzle, NodePgDatabase } from 'drizzle-orm/node-postgres';
import { ClsModule } from 'nestjs-cls';
import { Pool } from 'pg';
import {
  drizzleExecutor,
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxService,
  OutboxValidationError,
} from 'nestjs-outbox';
import { describeWithService } from '../support/services';
import { openPool, pgStoreFor } from '../stores/sql/pg-test-helpers';
import { dataSourceOptions, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';

/**
 * docs/stores.md "Without TypeORM: ambient transactions (nestjs-cls adapters)" (its snippet is the first
 * app here): with `@nestjs-cls/transactional`'s Drizzle adapter, `TransactionHost.tx` inside
 * `@Transactional()` is Drizzle's `tx`, which is what `drizzleExecutor(db)` takes, so `append()`
 * without `tx` joins it. A TypeORM `@Transactional()` is another client's transaction: refused,
 * nothing written.
 */

const DRIZZLE = Symbol('DRIZZLE');

@Injectable()
class Delivered {
  readonly ids: string[] = [];
  @OutboxHandler('order.placed')
  handle(event: OutboxEvent<{ id: string }>): void {
    this.ids.push(event.payload.id);
  }
}

describeWithService('postgres', 'drizzleExecutor and the nestjs-cls Drizzle adapter', () => {
  const prefix = uniquePrefix('dza');
  const orders = `${prefix}orders`;
  let pool: Pool;
  let app: INestApplication;

  @Injectable()
  class Orders {
    constructor(
      private readonly txHost: TransactionHost<TransactionalAdapterDrizzleOrm<NodePgDatabase>>,
      private readonly outbox: OutboxService,
    ) {}

    @Transactional()
    async place(id: string, fail = false): Promise<void> {
      await this.txHost.tx.execute(sql`INSERT INTO ${sql.raw(orders)} (id) VALUES (${id})`);
      // No tx: the append joins the @Transactional() transaction.
      await this.outbox.append({ type: 'order.placed', key: id, payload: { id } });
      if (fail) throw new Error('rolled back after the append');
    }
  }

  beforeAll(async () => {
    pool = openPool();
    const db = drizzle({ client: pool });
    await pool.query(`CREATE TABLE ${orders} (id text PRIMARY KEY)`);
    @Module({ providers: [{ provide: DRIZZLE, useValue: db }], exports: [DRIZZLE] })
    class DrizzleModule {}
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        DrizzleModule,
        ClsModule.forRoot({
          global: true,
          plugins: [
            new ClsPluginTransactional({
              imports: [DrizzleModule],
              adapter: new TransactionalAdapterDrizzleOrm({ drizzleInstanceToken: DRIZZLE }),
            }),
          ],
        }),
        OutboxModule.forRoot({
          store: { type: 'sql', executor: drizzleExecutor(db), tablePrefix: prefix },
          dispatcher: { pollInterval: 60_000 },
          retention: { cleanupIntervalMs: 0 },
        }),
      ],
      providers: [Orders, Delivered],
    })
    class AmbientApp {}
    const moduleRef = await Test.createTestingModule({ imports: [AmbientApp] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
  });

  afterAll(async () => {
    await app?.close();
    await pool?.query(`DROP TABLE IF EXISTS ${orders}`);
    await (await pgStoreFor(pool, prefix)).drop();
    await pool?.end();
  });

  const rows = async (table: string, where: string, id: string) =>
    Number(
      (await pool.query(`SELECT count(*) AS n FROM ${table} WHERE ${where} = $1`, [id])).rows[0].n,
    );

  it('a rolled-back @Transactional(): neither the order nor the event exists', async () => {
    await expect(app.get(Orders).place('rolled-back', true)).rejects.toThrow(/rolled back/);
    expect(await rows(orders, 'id', 'rolled-back')).toBe(0);
    expect(await rows(`${prefix}events`, 'event_key', 'rolled-back')).toBe(0);
    await app.get(OutboxDispatcher).drain();
    expect(app.get(Delivered).ids).not.toContain('rolled-back');
  });

  it('a committed @Transactional(): the event is delivered once', async () => {
    await app.get(Orders).place('committed');
    expect(await rows(orders, 'id', 'committed')).toBe(1);
    expect(await rows(`${prefix}events`, 'event_key', 'committed')).toBe(1);
    await app.get(OutboxDispatcher).drain();
    await app.get(OutboxDispatcher).drain();
    expect(app.get(Delivered).ids.filter((id) => id === 'committed')).toHaveLength(1);
  });
});

describeWithService('postgres', 'drizzleExecutor under a TypeORM @Transactional()', () => {
  const prefix = uniquePrefix('dzt');
  let pool: Pool;
  let app: INestApplication;

  @Injectable()
  class Checkout {
    constructor(
      private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
      private readonly outbox: OutboxService,
    ) {}

    @Transactional()
    async place(id: string): Promise<void> {
      await this.txHost.tx.query('SELECT 1');
      await this.outbox.append({ type: 'order.placed', key: id, payload: { id } });
    }
  }

  beforeAll(async () => {
    pool = openPool();
    @Module({
      imports: [
        TypeOrmModule.forRoot(dataSourceOptions('sqlite')),
        ClsModule.forRoot({
          global: true,
          plugins: [
            new ClsPluginTransactional({
              imports: [TypeOrmModule],
              adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: getDataSourceToken() }),
            }),
          ],
        }),
        OutboxModule.forRoot({
          store: {
            type: 'sql',
            executor: drizzleExecutor(drizzle({ client: pool })),
            tablePrefix: prefix,
          },
          dispatcher: { enabled: false },
          retention: { cleanupIntervalMs: 0 },
        }),
      ],
      providers: [Checkout],
    })
    class RefusingApp {}
    const moduleRef = await Test.createTestingModule({ imports: [RefusingApp] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
  });

  afterAll(async () => {
    await app?.close();
    await (await pgStoreFor(pool, prefix)).drop();
    await pool?.end();
  });

  it('is refused: the event would not roll back with that transaction', async () => {
    const error = await app
      .get(Checkout)
      .place('typeorm')
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).field).toBe('options.tx');
    expect((error as Error).message).toMatch(
      /@Transactional\(\) transaction.*TypeORM EntityManager.*Drizzle/s,
    );
    const { rows } = await pool.query(`SELECT count(*) AS n FROM ${prefix}events`);
    expect(Number(rows[0].n)).toBe(0);
  });
});
