import { Body, Controller, INestApplication, Injectable, Module, Post } from '@nestjs/common';
import { Propagation, Transactional, TransactionHost } from '@nestjs-cls/transactional';
import { ClsPluginTransactional } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { ClsModule } from 'nestjs-cls';
import request from 'supertest';
import { DataSource } from 'typeorm';
import {
  Inbox,
  InboxContext,
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxService,
} from 'nestjs-outbox';
import { describeWithService } from '../support/services';
import { dataSourceOptions, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';

const prefix = uniquePrefix('cls');
const ORDERS = `${prefix}orders`;

type Tx = TransactionalAdapterTypeOrm;

@Injectable()
class Orders {
  constructor(
    private readonly txHost: TransactionHost<Tx>,
    private readonly outbox: OutboxService,
  ) {}

  private async write(id: string) {
    await this.txHost.tx.query(`INSERT INTO ${ORDERS} (id) VALUES ($1)`, [id]);
    // No manager: the append joins the @Transactional() transaction.
    await this.outbox.append({ type: 'order.placed', payload: { id } });
  }

  @Transactional()
  async place(id: string, fail = false): Promise<void> {
    await this.write(id);
    if (fail) throw new Error('rolled back after the append');
  }

  @Transactional()
  async placeWithNested(
    outer: string,
    inner: string,
    propagation: Propagation,
    fail: boolean,
  ): Promise<void> {
    await this.write(outer);
    await this.inner(inner, propagation);
    if (fail) throw new Error('outer rolled back');
  }

  async inner(id: string, propagation: Propagation): Promise<void> {
    await this.txHost.withTransaction(propagation, () => this.write(id));
  }

  /** Called from an @Inbox() method: the inbox transaction is the ambient one. */
  @Transactional()
  async recordInInbox(id: string, fail: boolean): Promise<unknown> {
    await this.write(id);
    if (fail) throw new Error('inbox work failed');
    return this.txHost.tx;
  }
}

@Injectable()
class Delivered {
  readonly ids: string[] = [];

  @OutboxHandler('order.placed')
  handle(event: OutboxEvent<{ id: string }>): void {
    this.ids.push(event.payload.id);
  }
}

@Controller('inbox')
class InboxController {
  sameTransaction: boolean[] = [];

  constructor(
    private readonly orders: Orders,
    private readonly inbox: InboxContext,
  ) {}

  @Post()
  @Inbox()
  async consume(@Body() body: { id: string; fail?: boolean }): Promise<{ ok: true }> {
    const tx = await this.orders.recordInInbox(body.id, body.fail ?? false);
    this.sameTransaction.push(tx === this.inbox.manager);
    return { ok: true };
  }
}

describeWithService('postgres', '@nestjs-cls/transactional: ambient transactions', () => {
  let app: INestApplication;
  let dataSource: DataSource;
  let orders: Orders;
  let delivered: Delivered;

  beforeAll(async () => {
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        TypeOrmModule.forRoot(dataSourceOptions('postgres')),
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
          store: { type: 'typeorm', dataSourceToken: getDataSourceToken(), tablePrefix: prefix },
          dispatcher: { enabled: false },
          inbox: {
            dataSourceToken: getDataSourceToken(),
            tablePrefix: prefix,
            cleanupIntervalMs: 0,
          },
        }),
      ],
      controllers: [InboxController],
      providers: [Orders, Delivered],
    })
    class ClsApp {}
    const moduleRef = await Test.createTestingModule({ imports: [ClsApp] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    dataSource = app.get(DataSource);
    await dataSource.query(`CREATE TABLE IF NOT EXISTS ${ORDERS} (id varchar(64) PRIMARY KEY)`);
    await app.init();
    orders = app.get(Orders);
    delivered = app.get(Delivered);
  });

  afterAll(async () => {
    if (dataSource?.isInitialized) {
      const tables: { tablename: string }[] = await dataSource.query(
        'SELECT tablename FROM pg_tables WHERE tablename LIKE $1',
        [`${prefix}%`],
      );
      for (const { tablename } of tables)
        await dataSource.query(`DROP TABLE IF EXISTS "${tablename}" CASCADE`);
    }
    await app?.close();
  });

  const exists = async (id: string) =>
    Number(
      (await dataSource.query(`SELECT COUNT(*) AS n FROM ${ORDERS} WHERE id = $1`, [id]))[0].n,
    ) === 1;
  const drain = () => app.get(OutboxDispatcher).drain();

  it('rollback in a @Transactional() method: neither the order nor its event exists; nothing is delivered', async () => {
    await expect(orders.place('rolled-back', true)).rejects.toThrow('rolled back after the append');
    await drain();
    expect(await exists('rolled-back')).toBe(false);
    expect(delivered.ids).not.toContain('rolled-back');
  });

  it('commit of a @Transactional() method: the event is delivered', async () => {
    await orders.place('committed');
    await drain();
    expect(await exists('committed')).toBe(true);
    expect(delivered.ids).toContain('committed');
  });

  it('nested Propagation.Required joins the outer transaction: the outer rollback takes both events', async () => {
    await expect(
      orders.placeWithNested('req-outer', 'req-inner', Propagation.Required, true),
    ).rejects.toThrow('outer rolled back');
    await drain();
    expect(delivered.ids).not.toContain('req-outer');
    expect(delivered.ids).not.toContain('req-inner');
    expect(await exists('req-inner')).toBe(false);
  });

  it('nested Propagation.RequiresNew commits on its own: its event is delivered although the outer rolls back', async () => {
    await expect(
      orders.placeWithNested('new-outer', 'new-inner', Propagation.RequiresNew, true),
    ).rejects.toThrow('outer rolled back');
    await drain();
    expect(delivered.ids).not.toContain('new-outer');
    expect(delivered.ids).toContain('new-inner');
    expect(await exists('new-inner')).toBe(true);
  });

  it('nested Propagation.Nested (savepoint) commits with the outer transaction', async () => {
    await orders.placeWithNested('sp-outer', 'sp-inner', Propagation.Nested, false);
    await drain();
    expect(delivered.ids).toEqual(expect.arrayContaining(['sp-outer', 'sp-inner']));
  });

  it('@Inbox(): @Transactional() code inside writes in the inbox transaction', async () => {
    const controller = app.get(InboxController);
    const post = (body: object, key: string) =>
      request(app.getHttpServer()).post('/inbox').set('Idempotency-Key', key).send(body);

    await post({ id: 'in-fail', fail: true }, 'inbox-1').expect(500);
    expect(await exists('in-fail')).toBe(false);
    // The failure rolled back the inbox record too, so the same key runs again.
    await post({ id: 'in-ok' }, 'inbox-1').expect(201);
    expect(controller.sameTransaction).toEqual([true]);
    await drain();
    expect(await exists('in-ok')).toBe(true);
    expect(delivered.ids).toContain('in-ok');
    expect(delivered.ids).not.toContain('in-fail');
  });
});

describeWithService(
  'postgres',
  '@nestjs-cls/transactional: an ambient transaction that cannot be joined',
  () => {
    it('refuses the append instead of committing the event on its own', async () => {
      const other = await new DataSource(dataSourceOptions('postgres')).initialize();
      const storePrefix = uniquePrefix('clsother');

      @Injectable()
      class Writer {
        constructor(private readonly outbox: OutboxService) {}
        @Transactional()
        async write(): Promise<void> {
          await this.outbox.append({ type: 'order.placed', payload: { id: 'never' } });
        }
      }

      @Module({
        imports: [
          TypeOrmModule.forRoot(dataSourceOptions('postgres')),
          ClsModule.forRoot({
            global: true,
            plugins: [
              new ClsPluginTransactional({
                imports: [TypeOrmModule],
                adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: getDataSourceToken() }),
              }),
            ],
          }),
          // The outbox lives on another DataSource than the @Transactional() one.
          OutboxModule.forRoot({
            store: { type: 'typeorm', dataSource: other, tablePrefix: storePrefix },
            dispatcher: { enabled: false },
          }),
        ],
        providers: [Writer],
      })
      class MismatchApp {}
      const moduleRef = await Test.createTestingModule({ imports: [MismatchApp] }).compile();
      const app = moduleRef.createNestApplication({ logger: false });
      await app.init();
      try {
        await expect(app.get(Writer).write()).rejects.toThrow(
          /@Transactional\(\) transaction that the outbox cannot join/,
        );
        const rows = await other.query(`SELECT COUNT(*) AS n FROM ${storePrefix}events`);
        expect(Number(rows[0].n)).toBe(0);
      } finally {
        await app.close();
        for (const t of ['deliveries', 'events', 'schema_version'])
          await other.query(`DROP TABLE IF EXISTS ${storePrefix}${t} CASCADE`);
        await other.destroy();
      }
    });
  },
);
