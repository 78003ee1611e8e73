import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Body, Controller, INestApplication, Injectable, Module, Post } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { Kysely } from 'kysely';
import { Pool } from 'pg';
import request from 'supertest';
import {
  Inbox,
  InboxModule,
  InboxTx,
  kyselyExecutor,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxOptionsError,
  pgExecutor,
  SqlExecutor,
} from 'nestjs-outbox';
import { InboxStore } from '../../../lib/inbox/inbox.store';
import { postgresInboxDialect } from '../../../lib/inbox/dialects/postgres';
import { describeWithService } from '../../support/services';
import { openKysely } from '../../stores/sql/kysely-test-helpers';
import { openPool } from '../../stores/sql/pg-test-helpers';
import { uniquePrefix } from '../../stores/typeorm/typeorm-test-helpers';
import { openExecutorClient, SQL_CLIENTS } from './executor-clients';

/** The inbox's executor options, an inbox-only app over an executor, and pg error codes. */

async function bootstrapError(module: object): Promise<unknown> {
  try {
    const moduleRef = await Test.createTestingModule({ imports: [module as never] }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    await app.close();
    return null;
  } catch (error) {
    return error;
  }
}

describe('inbox executor options', () => {
  const executor = { sqlExecutor: true, query: async () => ({ rows: [], affected: 0 }) };

  it('OutboxModule: inbox.executor with dataSource fails with OutboxOptionsError naming inbox.executor', async () => {
    @Module({
      imports: [
        OutboxModule.forRoot({
          store: { type: 'memory' },
          dispatcher: { enabled: false },
          inbox: { executor: executor as unknown as SqlExecutor, dataSource: {} },
        }),
      ],
    })
    class Mixed {}
    const error = await bootstrapError(Mixed);
    expect(error).toBeInstanceOf(OutboxOptionsError);
    expect(error).toMatchObject({ field: 'inbox.executor' });
    expect((error as Error).message).toMatch(/give executor or dataSource, not both/);
  });

  it('InboxModule: executor with dataSourceToken, and a value that is no executor, are refused', async () => {
    @Module({
      imports: [
        InboxModule.forRoot({ executor: executor as unknown as SqlExecutor, dataSourceToken: 'x' }),
      ],
    })
    class MixedInbox {}
    expect(await bootstrapError(MixedInbox)).toMatchObject({
      field: 'executor',
      message: expect.stringMatching(/executor or dataSourceToken, not both/),
    });
    @Module({ imports: [InboxModule.forRoot({ executor: new Pool() as never })] })
    class PoolGiven {}
    expect(await bootstrapError(PoolGiven)).toMatchObject({
      field: 'executor',
      message: expect.stringMatching(/expected an executor such as pgExecutor\(pool\)/),
    });
  });

  it('@Inbox({ executor, dataSource }) and @InboxTx() on an outbox handler are refused at bootstrap', async () => {
    @Injectable()
    class Both {
      @Inbox({ executor: executor as unknown as SqlExecutor, dataSource: 'ds' })
      handle(): void {}
    }
    @Module({ imports: [InboxModule.forRoot({ dataSourceToken: 'ds' })], providers: [Both] })
    class BothApp {}
    expect(await bootstrapError(BothApp)).toMatchObject({
      field: '@Inbox executor',
      message: expect.stringMatching(/not both.*Both\.handle/),
    });

    @Injectable()
    class TxOnHandler {
      @OutboxHandler('x')
      @Inbox()
      handle(_event: OutboxEvent, @InboxTx() _tx?: unknown): void {}
    }
    @Module({
      imports: [
        OutboxModule.forRoot({
          store: { type: 'memory' },
          dispatcher: { enabled: false },
          inbox: { dataSourceToken: 'ds' },
        }),
      ],
      providers: [TxOnHandler],
    })
    class TxOnHandlerApp {}
    expect(await bootstrapError(TxOnHandlerApp)).toMatchObject({
      field: '@InboxTx',
      message: expect.stringMatching(/inboxContext\.tx/),
    });
  });

  it('an executor on SQLite is refused: the inbox runs there through TypeORM only', () => {
    const sqlite = {
      ...executor,
      client: 'better-sqlite3',
      dialect: 'sqlite',
      clientTransaction: async () => undefined,
    } as unknown as SqlExecutor;
    expect(() => new InboxStore(sqlite)).toThrow(
      expect.objectContaining({
        field: 'inbox.executor',
        message: expect.stringMatching(/SQLite only through TypeORM/),
      }) as never,
    );
  });
});

let seenTx: unknown[] = [];

@Controller('pay')
class PayController {
  @Post()
  @Inbox({ consumer: 'pay', duplicateResult: 'duplicate' })
  async pay(
    @Body() body: { id: string },
    @InboxTx() tx: { query(text: string): Promise<unknown> },
  ) {
    seenTx.push(tx);
    await tx.query(`INSERT INTO ${effects} (id) VALUES ('${body.id}')`);
    return 'paid';
  }
}

let effects = '';
let otherDb: Kysely<any>;

@Controller('other')
class OtherDatabaseController {
  @Post()
  @Inbox({ consumer: 'other', executor: lazyKysely(), duplicateResult: 'duplicate' })
  other(@InboxTx() trx: unknown) {
    seenTx.push(trx);
    return 'done';
  }
}

/** `@Inbox({ executor })` is evaluated at class definition: the executor wraps a db opened later. */
function lazyKysely(): SqlExecutor {
  const holder = openKysely(2);
  otherDb = holder.db;
  return kyselyExecutor(holder.db, { pool: holder.pool });
}

describeWithService('postgres', 'InboxModule.forRoot({ executor }): an inbox-only service', () => {
  const prefix = uniquePrefix('ixonly');
  let pool: Pool;
  let app: INestApplication;

  beforeAll(async () => {
    pool = openPool(4);
    effects = `${prefix}effects`;
    await pool.query(`CREATE TABLE ${effects} (id text PRIMARY KEY)`);
    @Module({
      imports: [
        InboxModule.forRoot({
          executor: pgExecutor(pool),
          tablePrefix: prefix,
          cleanupIntervalMs: 0,
        }),
      ],
      controllers: [PayController, OtherDatabaseController],
    })
    class ConsumerOnly {}
    const moduleRef = await Test.createTestingModule({ imports: [ConsumerOnly] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
  });

  afterAll(async () => {
    await app?.close();
    await pool.query(`DROP TABLE IF EXISTS ${effects}`);
    await pool.query(`DROP TABLE IF EXISTS ${prefix}inbox`);
    await pool.end();
    await otherDb?.destroy();
  });

  it('runs @Inbox() on the pg executor: the PoolClient as tx, one effect for two deliveries', async () => {
    seenTx = [];
    const post = () =>
      request(app.getHttpServer()).post('/pay').set('Idempotency-Key', 'p-1').send({ id: 'p-1' });
    expect((await post().expect(201)).text).toBe('paid');
    expect((await post().expect(201)).text).toBe('duplicate');
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${effects}`);
    expect(rows[0].n).toBe(1);
    expect(seenTx).toHaveLength(1);
    // pg's PoolClient: it has release() (a Pool has none).
    expect(typeof (seenTx[0] as { release?: unknown }).release).toBe('function');
  });

  it('@Inbox({ executor }) runs that consumer through its own executor (a Kysely Transaction)', async () => {
    seenTx = [];
    await request(app.getHttpServer()).post('/other').set('Idempotency-Key', 'o-1').expect(201);
    expect((seenTx[0] as { isTransaction?: unknown }).isTransaction).toBe(true);
    const { rows } = await pool.query(
      `SELECT consumer FROM ${prefix}inbox WHERE consumer = 'other'`,
    );
    expect(rows).toHaveLength(1);
  });
});

describeWithService('postgres', 'pg error codes reach the inbox dialect', () => {
  const raise = (code: string) =>
    `DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '${code}'; END $$`;

  describe.each(SQL_CLIENTS)('%s', (name) => {
    it('lock timeout (55P03), deadlock (40P01) and serialization failure (40001), through the connection and through tx', async () => {
      const c = await openExecutorClient(name, 2);
      try {
        const errors = await c.executor.clientTransaction(async (tx, connection) => {
          const caught: Record<string, unknown[]> = {};
          for (const code of ['55P03', '40P01', '40001']) {
            // Each failure aborts the transaction: a savepoint keeps it usable for the next.
            await connection.query({ text: 'SAVEPOINT s', params: [] });
            const onConnection = await connection
              .query({ text: raise(code), params: [] })
              .catch((e: unknown) => e);
            await connection.query({ text: 'ROLLBACK TO SAVEPOINT s', params: [] });
            const throughClient = await c.run(tx, raise(code)).catch((e: unknown) => e);
            await connection.query({ text: 'ROLLBACK TO SAVEPOINT s', params: [] });
            caught[code] = [onConnection, throughClient];
          }
          return caught;
        });
        for (const error of errors['55P03']) {
          expect(postgresInboxDialect.isLockTimeout(error)).toBe(true);
          expect(postgresInboxDialect.isTransient(error)).toBe(false);
        }
        for (const error of [...errors['40P01'], ...errors['40001']]) {
          expect(postgresInboxDialect.isTransient(error)).toBe(true);
          expect(postgresInboxDialect.isLockTimeout(error)).toBe(false);
        }
      } finally {
        await c.close();
      }
    });
  });
});
