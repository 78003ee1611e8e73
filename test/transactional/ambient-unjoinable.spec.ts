import { Body, Controller, INestApplication, Injectable, Module, Post } from '@nestjs/common';
import request from 'supertest';
import { ClsPluginTransactional, Transactional, TransactionHost } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { ClsModule } from 'nestjs-cls';
import type Redis from 'ioredis';
import type { DataSource } from 'typeorm';
import {
  Inbox,
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxService,
  OutboxStoreOptions,
  OutboxValidationError,
} from 'nestjs-outbox';
import { MemoryOutboxStore } from '../../lib/stores/memory/memory-outbox.store';
import { dataSourceOptions, openDataSource } from '../stores/typeorm/typeorm-test-helpers';
import { connect, dropPrefix, uniquePrefix } from '../stores/redis/redis-test-support';
import { describeWithService } from '../support/services';

/**
 * docs/publishing.md: an append inside a transaction the store cannot join
 * (Redis, memory, a custom store that does not declare `joinsTransactions`) is refused, unless the
 * caller passes `{ standalone: true }`; then the event is written on its own, whatever the
 * transaction around it does.
 */

@Injectable()
class Delivered {
  readonly ids: string[] = [];
  @OutboxHandler('order.placed')
  handle(event: OutboxEvent<{ id: string }>): void {
    this.ids.push(event.payload.id);
  }
}

@Injectable()
class Orders {
  constructor(
    private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
    private readonly outbox: OutboxService,
  ) {}

  @Transactional()
  async place(id: string, options: { standalone?: boolean; manager?: null } = {}): Promise<void> {
    await this.txHost.tx.query('INSERT INTO orders (id) VALUES (?)', [id]);
    await this.outbox.append({ type: 'order.placed', key: id, payload: { id } }, options);
    throw new Error('rolled back after the append');
  }
}

@Controller('consume')
class InboxConsumer {
  readonly errors: unknown[] = [];
  constructor(private readonly outbox: OutboxService) {}

  @Post()
  @Inbox()
  async consume(@Body() body: { id: string; standalone?: boolean }): Promise<void> {
    const { id, standalone } = body;
    try {
      await this.outbox.append({ type: 'order.placed', key: id, payload: { id } }, { standalone });
    } catch (error) {
      this.errors.push(error);
      throw error;
    }
    throw new Error('consumer failed after its append');
  }
}

async function appWith(store: OutboxStoreOptions): Promise<INestApplication> {
  const inboxSource = await openDataSource('sqlite');
  @Module({
    imports: [
      ScheduleModule.forRoot(),
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
        store,
        dispatcher: { enabled: false },
        inbox: { dataSource: inboxSource, cleanupIntervalMs: 0 },
      }),
    ],
    controllers: [InboxConsumer],
    providers: [Orders, Delivered],
  })
  class UnjoinableApp {}
  const moduleRef = await Test.createTestingModule({ imports: [UnjoinableApp] }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  await app.init();
  await app.get(getDataSourceToken()).query('CREATE TABLE orders (id varchar(64) PRIMARY KEY)');
  return app;
}

function refusedOn(name: string, store: () => OutboxStoreOptions, cleanup = async () => {}) {
  describe(`an ambient transaction the ${name} store cannot join`, () => {
    let app: INestApplication;
    beforeAll(async () => {
      app = await appWith(store());
    });
    afterAll(async () => {
      await app?.close();
      await cleanup();
    });

    const drain = () => app.get(OutboxDispatcher).drain();
    const post = (body: object, key: string) =>
      request(app.getHttpServer()).post('/consume').set('Idempotency-Key', key).send(body);
    const delivered = () => app.get(Delivered).ids;

    it('@Transactional(): append() is refused, and nothing is delivered after the rollback', async () => {
      const error = await app
        .get(Orders)
        .place('tx-refused')
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect((error as OutboxValidationError).field).toBe('options.standalone');
      expect(String((error as Error).message)).toMatch(
        /@Transactional\(\) transaction that the .* store cannot join.*standalone: true/s,
      );
      await drain();
      expect(delivered()).not.toContain('tx-refused');
    });

    it('{ manager: null } is no manager: refused the same way', async () => {
      const error = await app
        .get(Orders)
        .place('tx-null', { manager: null })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxValidationError);
      await drain();
      expect(delivered()).not.toContain('tx-null');
    });

    it('@Inbox(): append() is refused inside the inbox transaction', async () => {
      const res = await post({ id: 'inbox-refused' }, 'k1');
      expect(res.status).toBeGreaterThanOrEqual(400);
      const [error] = app.get(InboxConsumer).errors;
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect(String((error as Error).message)).toMatch(/@Inbox\(\) transaction/);
      await drain();
      expect(delivered()).not.toContain('inbox-refused');
    });

    it('{ standalone: true } writes the event on its own: delivered although the transaction rolled back', async () => {
      await expect(app.get(Orders).place('tx-standalone', { standalone: true })).rejects.toThrow(
        'rolled back after the append',
      );
      expect((await post({ id: 'inbox-standalone', standalone: true }, 'k2')).status).toBe(500);
      await drain();
      expect(delivered()).toEqual(expect.arrayContaining(['tx-standalone', 'inbox-standalone']));
    });

    it('outside any transaction, append() needs no option', async () => {
      await app.get(OutboxService).append({ type: 'order.placed', payload: { id: 'plain' } });
      await drain();
      expect(delivered()).toContain('plain');
    });
  });
}

refusedOn('memory', () => ({ type: 'memory' }));
refusedOn('custom', () => ({ type: 'custom', store: new MemoryOutboxStore() }));

describeWithService('redis', 'Redis', () => {
  const prefix = uniquePrefix('unjoinable');
  let client: Redis;
  refusedOn(
    'redis',
    () => {
      client = connect();
      return { type: 'redis', client, prefix };
    },
    async () => {
      await dropPrefix(client, prefix);
      client.disconnect();
    },
  );
});

describe('append() options', () => {
  it('refuses { standalone: true } together with a manager', async () => {
    const dataSource = await openDataSource('sqlite');
    const app = await appWith({ type: 'typeorm', dataSource });
    try {
      await dataSource.transaction(async (manager) => {
        await expect(
          app
            .get(OutboxService)
            .append({ type: 'order.placed', payload: {} }, { manager, standalone: true }),
        ).rejects.toThrow(/options\.standalone.*manager/s);
      });
      await expect(
        app
          .get(OutboxService)
          .append({ type: 'order.placed', payload: {} }, { standalone: 'yes' as never }),
      ).rejects.toThrow(/options\.standalone/);
    } finally {
      await app.close();
      await dataSource.destroy();
    }
  });

  it('a TypeORM store on the @Transactional() DataSource joins it with { manager: null } too', async () => {
    const app = await appWith({
      type: 'typeorm',
      dataSourceToken: getDataSourceToken(),
      tablePrefix: 'nullmgr_',
      ensureSchema: true,
    });
    try {
      await expect(app.get(Orders).place('null-joined', { manager: null })).rejects.toThrow(
        'rolled back after the append',
      );
      await app.get(OutboxDispatcher).drain();
      expect(app.get(Delivered).ids).not.toContain('null-joined');
      expect(
        await app
          .get(OutboxService)
          .append(
            { type: 'order.placed', payload: { id: 'ok' } },
            { manager: null, standalone: true },
          ),
      ).toBeDefined();
    } finally {
      await app.close();
    }
  });

  it('a custom store wrapping a TypeORM store joins the ambient transaction', async () => {
    const app = await appWith({ type: 'memory' });
    const dataSource = app.get<DataSource>(getDataSourceToken());
    await app.close();
    const { TypeOrmOutboxStore } = await import('../../lib/stores/typeorm/internal');
    expect(new TypeOrmOutboxStore(dataSource).joinsTransactions).toBe(true);
  });

  it('a custom store that declares joinsTransactions is handed the ambient manager', async () => {
    const seen: unknown[] = [];
    const inner = new MemoryOutboxStore();
    const joining = Object.assign(Object.create(inner) as MemoryOutboxStore, {
      joinsTransactions: true,
      append: (events: never, options?: { manager?: unknown }) => {
        seen.push(options?.manager);
        return inner.append(events);
      },
    });
    const app = await appWith({ type: 'custom', store: joining });
    try {
      await expect(app.get(Orders).place('joined')).rejects.toThrow('rolled back');
      expect(seen).toHaveLength(1);
      expect(seen[0]).toBeDefined();
    } finally {
      await app.close();
    }
  });
});
