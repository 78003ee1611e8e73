import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { sql } from 'drizzle-orm';
import { drizzle, MySql2Database } from 'drizzle-orm/mysql2';
import { createConnection, Pool } from 'mysql2/promise';
import { drizzleExecutor, OutboxOptionsError, OutboxValidationError } from 'nestjs-outbox';
import { describeOutboxStoreContract } from 'nestjs-outbox/testing';
import { AppendableEvent } from '../../../lib/interfaces/outbox-store.interface';
import { SqlOutboxStore } from '../../../lib/stores/typeorm/internal';
import { describeWithService } from '../../support/services';
import { uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { mysql2StoreFor, mysqlConnectionOptions, openMysqlPool } from './mysql2-test-helpers';

function event(key: string): AppendableEvent {
  return {
    id: randomUUID(),
    type: 'order.placed',
    payload: { key },
    key,
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers: ['H'],
  };
}

/** drizzleExecutor(db) on a Drizzle MySQL database (drizzle-orm/mysql2): MariaDB here. */
describeWithService('mariadb', 'sql store through drizzleExecutor on MySQL/MariaDB', () => {
  const prefix = uniquePrefix('cdzm');
  let pool: Pool;
  let db: MySql2Database;
  let tables: Awaited<ReturnType<typeof mysql2StoreFor>>;
  let store: SqlOutboxStore;
  beforeAll(async () => {
    pool = openMysqlPool();
    db = drizzle({ client: pool });
    tables = await mysql2StoreFor(pool, prefix);
    await tables.store.close();
    store = new SqlOutboxStore(drizzleExecutor(db), { tablePrefix: prefix });
  });
  afterAll(async () => {
    await store?.close();
    await tables?.drop();
    await pool?.end();
  });

  describeOutboxStoreContract(
    'sql store (Drizzle, mysql2)',
    async () => {
      await tables.empty();
      return { store };
    },
    { leaseMs: 400 },
  );

  describe("Drizzle's tx", () => {
    beforeEach(() => tables.empty());
    const count = async (key: string) => {
      const [rows] = await pool.query(
        `SELECT count(*) AS n FROM ${prefix}events WHERE event_key = ?`,
        [key],
      );
      return Number((rows as Array<{ n: number }>)[0].n);
    };

    it('an append in a committed tx exists; in a rolled-back one it does not', async () => {
      await db.transaction(async (tx) => {
        await store.append([event('committed')], { tx });
      });
      expect(await count('committed')).toBe(1);
      await db
        .transaction(async (tx) => {
          await store.append([event('rolled-back')], { tx });
          tx.rollback();
        })
        .catch(() => undefined);
      expect(await count('rolled-back')).toBe(0);
      // Inside a nested transaction (a savepoint) whose outer transaction rolls back.
      await db
        .transaction(async (tx) => {
          await tx.transaction(async (inner) => {
            await store.append([event('nested')], { tx: inner });
          });
          throw new Error('outer fails');
        })
        .catch(() => undefined);
      expect(await count('nested')).toBe(0);
    });

    it('refuses the db, a finished tx, a mysql2 connection, another database’s tx', async () => {
      const refused = (tx: unknown) =>
        store.append([event('refused')], { tx }).then(
          () => new Error('accepted'),
          (e: unknown) => e as Error,
        );
      expect((await refused(db)).message).toMatch(/options\.tx.*Drizzle database \(db\)/s);
      let finished: unknown;
      await db.transaction(async (tx) => {
        finished = tx;
      });
      expect((await refused(finished)).message).toMatch(/options\.tx.*released/s);
      const conn = await pool.getConnection();
      try {
        await conn.beginTransaction();
        expect((await refused(conn)).message).toMatch(/options\.tx.*mysql2 PoolConnection/s);
        await conn.rollback();
      } finally {
        conn.release();
      }
      const other = openMysqlPool(1);
      try {
        await drizzle({ client: other }).transaction(async (tx) => {
          expect(await refused(tx)).toBeInstanceOf(OutboxValidationError);
          expect((await refused(tx)).message).toMatch(/not a connection of the pool/);
        });
      } finally {
        await other.end();
      }
      expect(await count('refused')).toBe(0);
    });

    it('clientTransaction runs in Drizzle’s own transaction; ownsClient is the db', async () => {
      const executor = drizzleExecutor(db);
      expect(executor.ownsClient?.(db)).toBe(true);
      expect(executor.ownsClient?.(pool)).toBe(false);
      const failed = await executor.clientTransaction!(async (tx, connection) => {
        await (tx as typeof db).execute(sql`SELECT 1`);
        const caller = await executor.transactionOf(tx);
        await store.append([event('client-tx')], { tx });
        await connection.query({ text: 'SELECT 1', params: [] });
        expect(caller.key).toBeDefined();
        throw new Error('roll back');
      }).catch((e: Error) => e);
      expect(failed.message).toBe('roll back');
      expect(await count('client-tx')).toBe(0);
    });

    it('refuses a db over a single connection, and a tx as the executor', async () => {
      const single = await createConnection(mysqlConnectionOptions);
      try {
        expect(() => drizzleExecutor(drizzle({ client: single }))).toThrow(
          /store\.executor.*mysql2 Pool.*single connection/s,
        );
      } finally {
        await single.end();
      }
      await db.transaction(async (tx) => {
        expect(() => drizzleExecutor(tx)).toThrow(OutboxOptionsError);
      });
    });
  });
});
