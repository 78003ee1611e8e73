import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { INestApplication, Injectable, Module } from '@nestjs/common';
import {
  AggregateRoot,
  CqrsModule,
  EventBus,
  EventPublisher,
  EventsHandler,
  IEventHandler,
} from '@nestjs/cqrs';
import {
  ClsPluginTransactional,
  Propagation,
  Transactional,
  TransactionHost,
} from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { ClsModule } from 'nestjs-cls';
import { DataSource, DataSourceOptions } from 'typeorm';
import {
  OUTBOX_STORE,
  OutboxCqrsModule,
  OutboxDispatcher,
  OutboxedEvent,
  InboxContext,
  OutboxedHandler,
  OutboxModule,
  OutboxStore,
} from 'nestjs-outbox';
import { OutboxHandlerRegistry } from '../../lib/outbox-handler.registry';
import { eventually } from '../dispatcher/wake-test-helpers';
import { serviceUp } from '../support/services';
import { dataSourceOptions, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';

@OutboxedEvent({ type: 'order.placed', version: 2, key: (e: OrderPlaced) => e.orderId })
class OrderPlaced {
  constructor(
    readonly orderId: string,
    readonly total: number,
  ) {}

  describe(): string {
    return `${this.orderId}=${this.total}`;
  }
}

/** Rows the inbox-wrapped handler wrote through the inbox transaction: table name per run. */
const ledger = { table: '', param: '?' };

@EventsHandler(OrderPlaced)
@OutboxedHandler({ name: 'ledger', inbox: true })
class Ledger implements IEventHandler<OrderPlaced> {
  constructor(private readonly inbox: InboxContext) {}

  async handle(event: OrderPlaced): Promise<void> {
    await this.inbox.manager.query(
      `INSERT INTO ${ledger.table} (order_id, message_id) VALUES (${ledger.param}, ${ledger.param.replace('1', '2')})`,
      [event.orderId, this.inbox.messageId],
    );
  }
}

/** No opt-in: stays on Nest's in-memory bus. */
class OrderShipped {
  constructor(readonly orderId: string) {}
}

class Order extends AggregateRoot {
  constructor(readonly id: string) {
    super();
  }

  place(total: number): void {
    this.apply(new OrderPlaced(this.id, total));
  }

  ship(): void {
    this.apply(new OrderShipped(this.id));
  }
}

/** Deliveries by handler, kept across app restarts. */
const seen = {
  mailer: [] as OrderPlaced[],
  auditor: [] as OrderPlaced[],
  shipped: [] as unknown[],
};
const failing = new Set<string>();
const attempts = new Map<string, number>();

@EventsHandler(OrderPlaced)
class Mailer implements IEventHandler<OrderPlaced> {
  handle(event: OrderPlaced): void {
    seen.mailer.push(event);
  }
}

@EventsHandler(OrderPlaced)
@OutboxedHandler({ name: 'auditor', maxAttempts: 3 })
class Auditor implements IEventHandler<OrderPlaced> {
  handle(event: OrderPlaced): void {
    attempts.set(event.orderId, (attempts.get(event.orderId) ?? 0) + 1);
    if (failing.has(event.orderId)) throw new Error(`auditor down for ${event.orderId}`);
    seen.auditor.push(event);
  }
}

@EventsHandler(OrderShipped)
class Shipping implements IEventHandler<OrderShipped> {
  handle(event: OrderShipped): void {
    seen.shipped.push(event);
  }
}

for (const dialect of ['postgres', 'sqlite'] as const) {
  const run = dialect === 'sqlite' || serviceUp('postgres') ? describe : describe.skip;
  run(`CQRS bridge on ${dialect} (TypeORM, @Transactional())`, () => {
    const prefix = uniquePrefix('cqrs');
    const ORDERS = `${prefix}orders`;
    const dir = dialect === 'sqlite' ? mkdtempSync(join(tmpdir(), 'outbox-cqrs-')) : '';
    const dbOptions: DataSourceOptions =
      dialect === 'sqlite'
        ? { type: 'better-sqlite3', database: join(dir, 'test.db') }
        : dataSourceOptions('postgres');
    const param = dialect === 'postgres' ? '$1' : '?';
    const LEDGER = `${prefix}ledger`;

    @Injectable()
    class Orders {
      constructor(
        private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
        private readonly publisher: EventPublisher,
      ) {}

      /** `commit()` is the last thing before the transaction ends: nothing awaits the append. */
      @Transactional()
      async place(id: string, total: number, fail = false): Promise<void> {
        await this.txHost.tx.query(`INSERT INTO ${ORDERS} (id) VALUES (${param})`, [id]);
        const order = this.publisher.mergeObjectContext(new Order(id));
        order.place(total);
        if (fail) throw new Error('rolled back');
        order.commit();
      }

      @Transactional()
      async placeThenFail(id: string): Promise<void> {
        await this.txHost.tx.query(`INSERT INTO ${ORDERS} (id) VALUES (${param})`, [id]);
        const order = this.publisher.mergeObjectContext(new Order(id));
        order.place(1);
        order.commit();
        throw new Error('rolled back after commit()');
      }

      /** commit() inside a nested (savepoint) transaction, then the outer one ends. */
      @Transactional()
      async placeNested(id: string, failOuter: boolean): Promise<void> {
        await this.txHost.tx.query(`INSERT INTO ${ORDERS} (id) VALUES (${param})`, [id]);
        await this.txHost.withTransaction(Propagation.Nested, async () => {
          const order = this.publisher.mergeObjectContext(new Order(id));
          order.place(2);
          order.commit();
        });
        if (failOuter) throw new Error('outer rolled back');
      }

      @Transactional()
      async ship(id: string, fail: boolean): Promise<void> {
        const order = this.publisher.mergeObjectContext(new Order(id));
        order.ship();
        order.commit();
        if (fail) throw new Error('rolled back');
      }
    }

    const apps: INestApplication[] = [];
    async function start(): Promise<INestApplication> {
      @Module({
        imports: [
          ScheduleModule.forRoot(),
          CqrsModule.forRoot(),
          TypeOrmModule.forRoot(dbOptions),
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
            dispatcher: {
              enabled: false,
              backoff: { initialMs: 10, maxMs: 10, jitter: 0 },
            },
          }),
          OutboxCqrsModule.forRoot(),
        ],
        providers: [Orders, Mailer, Auditor, Shipping, Ledger],
      })
      class CqrsApp {}
      const moduleRef = await Test.createTestingModule({ imports: [CqrsApp] }).compile();
      const app = moduleRef.createNestApplication({ logger: false });
      await app
        .get(DataSource)
        .query(`CREATE TABLE IF NOT EXISTS ${ORDERS} (id varchar(64) PRIMARY KEY)`);
      await app
        .get(DataSource)
        .query(
          `CREATE TABLE IF NOT EXISTS ${LEDGER} (order_id varchar(64) NOT NULL, message_id varchar(64) NOT NULL)`,
        );
      await app.init();
      apps.push(app);
      return app;
    }

    let app: INestApplication;
    const drain = () => app.get(OutboxDispatcher).drain();
    const exists = async (id: string) =>
      (await app.get(DataSource).query(`SELECT id FROM ${ORDERS} WHERE id = ${param}`, [id]))
        .length === 1;
    const ids = (list: { orderId: string }[]) => list.map((e) => e.orderId);

    beforeAll(async () => {
      ledger.table = LEDGER;
      ledger.param = param;
      for (const list of Object.values(seen)) list.length = 0;
      attempts.clear();
      app = await start();
    });

    afterAll(async () => {
      if (dialect === 'postgres' && app) {
        const ds = app.get(DataSource);
        const tables: { tablename: string }[] = await ds.query(
          'SELECT tablename FROM pg_tables WHERE tablename LIKE $1',
          [`${prefix}%`],
        );
        for (const { tablename } of tables)
          await ds.query(`DROP TABLE IF EXISTS "${tablename}" CASCADE`);
      }
      for (const a of apps) await a.close().catch(() => undefined);
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('commit() in a transaction that rolls back delivers nothing', async () => {
      await expect(app.get(Orders).placeThenFail('rb-1')).rejects.toThrow(
        'rolled back after commit()',
      );
      await expect(app.get(Orders).place('rb-2', 5, true)).rejects.toThrow('rolled back');
      await drain();
      expect(await exists('rb-1')).toBe(false);
      expect(ids(seen.mailer)).not.toContain('rb-1');
      expect(ids(seen.auditor)).not.toContain('rb-1');
      const store = app.get<OutboxStore>(OUTBOX_STORE);
      expect((await store.stats()).pending ?? 0).toBe(0);
    });

    it('an append that fails after commit() fails the transaction: the order row rolls back with it', async () => {
      // A BigInt is not JSON: the append is refused after commit() returned.
      await expect(app.get(Orders).place('bad-1', 1n as unknown as number)).rejects.toThrow(
        'payload',
      );
      expect(await exists('bad-1')).toBe(false);
    });

    it('commit() in a transaction that commits reaches each @EventsHandler once, as a real OrderPlaced', async () => {
      await app.get(Orders).place('ok-1', 42);
      expect(seen.mailer.filter((e) => e.orderId === 'ok-1')).toHaveLength(0); // not in memory
      await drain();
      await drain();
      const mailed = seen.mailer.filter((e) => e.orderId === 'ok-1');
      const audited = seen.auditor.filter((e) => e.orderId === 'ok-1');
      expect(mailed).toHaveLength(1);
      expect(audited).toHaveLength(1);
      expect(mailed[0]).toBeInstanceOf(OrderPlaced);
      expect(mailed[0].describe()).toBe('ok-1=42');
      expect(app.get(OutboxHandlerRegistry).handlerNamesFor('order.placed').sort()).toEqual([
        'Mailer.handle',
        'auditor',
        'ledger',
      ]);
    });

    it('commit() in a nested transaction follows the outer one: rolled back, nothing; committed, once', async () => {
      await expect(app.get(Orders).placeNested('nested-rb', true)).rejects.toThrow(
        'outer rolled back',
      );
      await app.get(Orders).placeNested('nested-ok', false);
      await drain();
      await drain();
      expect(ids(seen.mailer).filter((id) => id.startsWith('nested-'))).toEqual(['nested-ok']);
      expect(await exists('nested-rb')).toBe(false);
    });

    it('@OutboxedHandler({ inbox: true }) writes in the inbox transaction, and a redelivered event has no second effect', async () => {
      await app.get(Orders).place('inbox-1', 4);
      await drain();
      const rows = async () =>
        (await app
          .get(DataSource)
          .query(`SELECT message_id FROM ${LEDGER} WHERE order_id = ${param}`, ['inbox-1'])) as {
          message_id: string;
        }[];
      expect(await rows()).toHaveLength(1);
      // The dispatcher delivering the same event again (a lease lost after the commit, a
      // replay): the handler entry it calls finds the inbox record and does nothing.
      const [first] = await rows();
      const again = {
        id: first.message_id,
        type: 'order.placed',
        key: 'inbox-1',
        payload: { orderId: 'inbox-1', total: 4 },
        headers: { 'event-version': '2' },
        occurredAt: new Date(),
        availableAt: new Date(),
      };
      const entry = app.get(OutboxHandlerRegistry).get('ledger')!;
      await entry.invoke(again as never, {} as never);
      await entry.invoke(again as never, {} as never);
      expect(await rows()).toHaveLength(1);
    });

    it('an event committed before a restart is delivered by the next app, once', async () => {
      await app.get(Orders).place('restart-1', 7);
      await app.close();
      app = await start();
      await drain();
      await drain();
      expect(seen.mailer.filter((e) => e.orderId === 'restart-1')).toHaveLength(1);
      expect(seen.auditor.filter((e) => e.orderId === 'restart-1')).toHaveLength(1);
      expect(seen.mailer.find((e) => e.orderId === 'restart-1')).toBeInstanceOf(OrderPlaced);
    });

    it('a failing @EventsHandler is retried, then dead-lettered; the other handler gets it once', async () => {
      failing.add('fail-1');
      await app.get(Orders).place('fail-1', 3);
      const store = app.get<OutboxStore>(OUTBOX_STORE);
      const dead = async () =>
        (await store.listDeadLetters({ limit: 50 })).items.filter((d) => d.key === 'fail-1');
      expect(
        await eventually(async () => {
          await drain();
          return (await dead()).length === 1;
        }, 10_000),
      ).toBe(true);
      const [letter] = await dead();
      expect(letter.handler).toBe('auditor'); // @OutboxedHandler's name and maxAttempts
      expect(letter.type).toBe('order.placed');
      expect(letter.headers['event-version']).toBe('2');
      expect(letter.attempts).toBe(3);
      expect(attempts.get('fail-1')).toBe(3);
      expect(seen.mailer.filter((e) => e.orderId === 'fail-1')).toHaveLength(1);
      expect(seen.auditor.filter((e) => e.orderId === 'fail-1')).toHaveLength(0);
    });

    it('an event class without the opt-in keeps in-memory behaviour (delivered at once, even on rollback)', async () => {
      await app.get(Orders).ship('ship-1', false);
      await expect(app.get(Orders).ship('ship-2', true)).rejects.toThrow('rolled back');
      expect(await eventually(() => seen.shipped.length >= 2, 2_000)).toBe(true);
      expect(seen.shipped.map((e) => (e as OrderShipped).orderId).sort()).toEqual([
        'ship-1',
        'ship-2',
      ]);
      expect(seen.shipped[0]).toBeInstanceOf(OrderShipped);
      expect(app.get(OutboxHandlerRegistry).handlerNamesFor('OrderShipped')).toEqual([]);
      const store = app.get<OutboxStore>(OUTBOX_STORE);
      await drain();
      expect((await store.stats()).pending ?? 0).toBe(0);
    });

    it('EventBus.publish() outside a transaction appends on its own at once and returns the append', async () => {
      const bus = app.get(EventBus);
      const appended = (await bus.publish(new OrderPlaced('direct-1', 9))) as {
        id: string;
        key: string;
      }[];
      expect(appended[0].key).toBe('direct-1');
      await drain();
      expect(seen.mailer.filter((e) => e.orderId === 'direct-1')).toHaveLength(1);
    });
  });
}
