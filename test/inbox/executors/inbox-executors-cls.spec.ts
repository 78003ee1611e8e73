import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller, INestApplication, Module, Post } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  ClsPluginTransactional,
  TransactionalAdapter,
  TransactionHost,
} from '@nestjs-cls/transactional';
import { ClsModule } from 'nestjs-cls';
import { Pool, PoolClient } from 'pg';
import request from 'supertest';
import { Inbox, InboxModule, InboxTx, pgExecutor } from 'nestjs-outbox';
import { describeWithService } from '../../support/services';
import { openPool } from '../../stores/sql/pg-test-helpers';
import { uniquePrefix } from '../../stores/typeorm/typeorm-test-helpers';

/**
 * `@nestjs-cls/transactional` inside an `@Inbox()` method over an executor: the host's `tx` is the
 * inbox's PoolClient when the host's adapter is on the executor's Pool (`ownsClient`), and stays
 * its own when it is on another Pool.
 */

/** A minimal node-postgres adapter: the Pool outside a transaction, a PoolClient inside. */
function pgAdapter(pool: Pool): TransactionalAdapter<Pool, Pool | PoolClient, object> {
  return {
    connection: pool,
    optionsFactory: (connection) => ({
      getFallbackInstance: () => connection,
      wrapWithTransaction: async (_options, fn, setTx) => {
        const client = await connection.connect();
        try {
          await client.query('BEGIN');
          setTx(client);
          const result = await fn();
          await client.query('COMMIT');
          return result;
        } catch (error) {
          await client.query('ROLLBACK');
          throw error;
        } finally {
          client.release();
        }
      },
    }),
  };
}

@Controller('cls')
class ClsController {
  constructor(private readonly txHost: TransactionHost) {}

  @Post()
  @Inbox({ consumer: 'cls' })
  seen(@InboxTx() tx: unknown) {
    return {
      active: this.txHost.isTransactionActive(),
      joined: this.txHost.tx === tx,
    };
  }
}

describeWithService('postgres', '@nestjs-cls/transactional in @Inbox() over pgExecutor', () => {
  describe.each([
    ['on the inbox Pool', true],
    ['on another Pool', false],
  ])('a TransactionHost %s', (_title, samePool) => {
    const prefix = uniquePrefix('ixcls');
    let pool: Pool;
    let other: Pool;
    let app: INestApplication;

    beforeAll(async () => {
      pool = openPool(3);
      other = openPool(1);
      @Module({
        imports: [
          ClsModule.forRoot({
            global: true,
            plugins: [new ClsPluginTransactional({ adapter: pgAdapter(samePool ? pool : other) })],
          }),
          InboxModule.forRoot({
            executor: pgExecutor(pool),
            tablePrefix: prefix,
            cleanupIntervalMs: 0,
          }),
        ],
        controllers: [ClsController],
      })
      class ClsInboxApp {}
      const moduleRef = await Test.createTestingModule({ imports: [ClsInboxApp] }).compile();
      app = moduleRef.createNestApplication({ logger: false });
      await app.init();
    });

    afterAll(async () => {
      await app?.close();
      await pool.query(`DROP TABLE IF EXISTS ${prefix}inbox`);
      await pool.end();
      await other.end();
    });

    it(
      samePool
        ? "runs in the inbox transaction (txHost.tx is @InboxTx()'s client)"
        : 'keeps its own transactions',
      async () => {
        const { body } = await request(app.getHttpServer())
          .post('/cls')
          .set('Idempotency-Key', 'c-1')
          .expect(201);
        expect(body).toEqual({ active: samePool, joined: samePool });
      },
    );
  });
});
