import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { INestApplication, Injectable, Module } from '@nestjs/common';
import { EventEmitter2, EventEmitterModule, OnEvent } from '@nestjs/event-emitter';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { DataSource, DataSourceOptions } from 'typeorm';
import {
  InboxContext,
  OUTBOX_STORE,
  OutboxDispatcher,
  OutboxEvent,
  OutboxListener,
  OutboxModule,
  OutboxService,
  OutboxStore,
} from 'nestjs-outbox';
import { OutboxHandlerRegistry } from '../../lib/outbox-handler.registry';
import { eventually } from '../dispatcher/wake-test-helpers';
import { serviceUp } from '../support/services';
import { dataSourceOptions, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';

/** Calls by listener, kept across app restarts. */
const seen = {
  placed: [] as { id: string; eventId?: string }[],
  failed: 0,
  memoryOnly: [] as string[],
};

@Injectable()
class Listeners {
  @OnEvent('order.placed')
  @OutboxListener()
  onPlaced(payload: { id: string }, event?: OutboxEvent): void {
    seen.placed.push({ id: payload.id, eventId: event?.id });
  }

  @OnEvent('order.refunded')
  @OutboxListener({ name: 'refund-listener', maxAttempts: 3 })
  onRefunded(): void {
    seen.failed++;
    throw new Error('refund service down');
  }

  /** No opt-in: only in-memory emits reach it. */
  @OnEvent('order.placed')
  memoryOnly(payload: { id: string }): void {
    seen.memoryOnly.push(payload.id);
  }
}

/** Where the inbox-wrapped listener writes, per run (table and placeholders of the dialect). */
const ledger = { table: '', params: ['?', '?'] };

@Injectable()
class LedgerListener {
  constructor(private readonly inbox: InboxContext) {}

  @OnEvent('order.booked')
  @OutboxListener({ name: 'ledger', inbox: true })
  async onBooked(payload: { id: string }): Promise<void> {
    await this.inbox.manager.query(
      `INSERT INTO ${ledger.table} (order_id, message_id) VALUES (${ledger.params.join(', ')})`,
      [payload.id, this.inbox.messageId],
    );
  }
}

for (const dialect of ['postgres', 'sqlite'] as const) {
  const run = dialect === 'sqlite' || serviceUp('postgres') ? describe : describe.skip;
  run(`@OutboxListener() on ${dialect} (TypeORM)`, () => {
    const prefix = uniquePrefix('emit');
    const dir = dialect === 'sqlite' ? mkdtempSync(join(tmpdir(), 'outbox-emit-')) : '';
    const dbOptions: DataSourceOptions =
      dialect === 'sqlite'
        ? { type: 'better-sqlite3', database: join(dir, 'test.db') }
        : dataSourceOptions('postgres');

    const LEDGER = `${prefix}ledger`;
    const apps: INestApplication[] = [];
    async function start(): Promise<INestApplication> {
      @Module({
        imports: [
          ScheduleModule.forRoot(),
          EventEmitterModule.forRoot(),
          TypeOrmModule.forRoot(dbOptions),
          OutboxModule.forRoot({
            store: { type: 'typeorm', dataSourceToken: getDataSourceToken(), tablePrefix: prefix },
            dispatcher: { enabled: false, backoff: { initialMs: 10, maxMs: 10, jitter: 0 } },
          }),
        ],
        providers: [Listeners, LedgerListener],
      })
      class EmitterApp {}
      const moduleRef = await Test.createTestingModule({ imports: [EmitterApp] }).compile();
      const app = moduleRef.createNestApplication({ logger: false });
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
    const placeIn = (id: string, fail: boolean) =>
      app.get(DataSource).transaction(async (manager) => {
        await app
          .get(OutboxService)
          .append({ type: 'order.placed', key: id, payload: { id } }, { manager });
        if (fail) throw new Error('rolled back');
      });
    const placed = (id: string) => seen.placed.filter((p) => p.id === id);

    beforeAll(async () => {
      seen.placed.length = 0;
      seen.memoryOnly.length = 0;
      seen.failed = 0;
      ledger.table = LEDGER;
      ledger.params = dialect === 'postgres' ? ['$1', '$2'] : ['?', '?'];
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

    it('only the marked listener is an outbox handler', () => {
      const registry = app.get(OutboxHandlerRegistry);
      expect(registry.handlerNamesFor('order.placed')).toEqual(['Listeners.onPlaced']);
      expect(registry.handlerNamesFor('order.refunded')).toEqual(['refund-listener']);
    });

    it('@OutboxListener({ inbox: true }) writes in the inbox transaction; a redelivered event has no second effect', async () => {
      const event = await app
        .get(OutboxService)
        .append({ type: 'order.booked', key: 'b-1', payload: { id: 'b-1' } });
      await drain();
      const rows = async () =>
        (await app
          .get(DataSource)
          .query(`SELECT message_id FROM ${LEDGER} WHERE order_id = ${ledger.params[0]}`, [
            'b-1',
          ])) as { message_id: string }[];
      expect(await rows()).toEqual([{ message_id: event.id }]);
      // The dispatcher delivering it again (a lease lost after the commit, a replay).
      const entry = app.get(OutboxHandlerRegistry).get('ledger')!;
      await entry.invoke(event, {} as never);
      expect(await rows()).toHaveLength(1);
    });

    it('an append in a transaction that rolls back reaches no listener', async () => {
      await expect(placeIn('rb-1', true)).rejects.toThrow('rolled back');
      await drain();
      expect(placed('rb-1')).toEqual([]);
      expect((await app.get<OutboxStore>(OUTBOX_STORE).stats()).pending).toBe(0);
    });

    it('a committed append reaches the listener once, as (payload, event), and not the unmarked one', async () => {
      await placeIn('ok-1', false);
      await drain();
      await drain();
      expect(placed('ok-1')).toHaveLength(1);
      expect(placed('ok-1')[0].eventId).toEqual(expect.any(String));
      expect(seen.memoryOnly).not.toContain('ok-1');
    });

    it('an append committed before a restart reaches the listener of the next app, once', async () => {
      await placeIn('restart-1', false);
      await app.close();
      app = await start();
      await drain();
      await drain();
      expect(placed('restart-1')).toHaveLength(1);
    });

    it('a failing listener is retried, then dead-lettered', async () => {
      await app
        .get(OutboxService)
        .append({ type: 'order.refunded', key: 'refund-1', payload: { id: 'refund-1' } });
      const store = app.get<OutboxStore>(OUTBOX_STORE);
      const dead = async () =>
        (await store.listDeadLetters({ limit: 50 })).items.filter((d) => d.key === 'refund-1');
      expect(
        await eventually(async () => {
          await drain();
          return (await dead()).length === 1;
        }, 10_000),
      ).toBe(true);
      const [letter] = await dead();
      expect(letter.handler).toBe('refund-listener');
      expect(letter.attempts).toBe(3);
      expect(letter.errors.at(-1)?.message).toContain('refund service down');
      expect(seen.failed).toBe(3);
    });

    it('an in-memory emit still calls every @OnEvent listener, as before', async () => {
      await app.get(EventEmitter2).emitAsync('order.placed', { id: 'mem-1' });
      expect(placed('mem-1')).toHaveLength(1);
      expect(seen.memoryOnly).toContain('mem-1');
    });
  });
}
