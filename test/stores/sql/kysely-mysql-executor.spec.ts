import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { CamelCasePlugin, Kysely, sql } from 'kysely';
import { Pool as CallbackPool } from 'mysql2';
import { Pool } from 'mysql2/promise';
import { kyselyExecutor, OutboxOptionsError, OutboxValidationError } from 'nestjs-outbox';
import { describeOutboxStoreContract } from 'nestjs-outbox/testing';
import { AppendableEvent } from '../../../lib/interfaces/outbox-store.interface';
import { SqlOutboxStore } from '../../../lib/stores/typeorm/internal';
import { describeWithService } from '../../support/services';
import { uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { openKyselyMysql } from './kysely-test-helpers';
import { mysql2StoreFor, openMysqlPool } from './mysql2-test-helpers';

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

/** kyselyExecutor(db, { pool }) on a Kysely with MysqlDialect over a mysql2 pool: MariaDB here. */
describeWithService('mariadb', 'sql store through kyselyExecutor on MySQL/MariaDB', () => {
  const prefix = uniquePrefix('ckym');
  let pool: CallbackPool;
  let promisePool: Pool;
  let db: Kysely<any>;
  let tables: Awaited<ReturnType<typeof mysql2StoreFor>>;
  let store: SqlOutboxStore;
  beforeAll(async () => {
    ({ db, pool, promisePool } = openKyselyMysql());
    // The app's db renames columns: the store's statements never go through its plugins.
    db = db.withPlugin(new CamelCasePlugin());
    tables = await mysql2StoreFor(promisePool, prefix);
    await tables.store.close();
    store = new SqlOutboxStore(kyselyExecutor(db, { pool }), { tablePrefix: prefix });
  });
  afterAll(async () => {
    await store?.close();
    await tables?.drop();
    await db?.destroy();
  });

  describeOutboxStoreContract(
    'sql store (Kysely, mysql2)',
    async () => {
      await tables.empty();
      return { store };
    },
    { leaseMs: 400 },
  );

  describe("Kysely's Transaction", () => {
    beforeEach(() => tables.empty());
    const count = async (key: string) => {
      const [rows] = await promisePool.query(
        `SELECT count(*) AS n FROM ${prefix}events WHERE event_key = ?`,
        [key],
      );
      return Number((rows as Array<{ n: number }>)[0].n);
    };
    const refused = (tx: unknown) =>
      store.append([event('refused')], { tx }).then(
        () => new Error('accepted'),
        (e: unknown) => e as Error,
      );

    it('an append in a committed transaction exists; in a rolled-back one it does not', async () => {
      await db.transaction().execute(async (trx) => {
        await store.append([event('committed')], { tx: trx });
      });
      expect(await count('committed')).toBe(1);
      await db
        .transaction()
        .execute(async (trx) => {
          await store.append([event('rolled-back')], { tx: trx });
          throw new Error('roll back');
        })
        .catch(() => undefined);
      expect(await count('rolled-back')).toBe(0);
      const controlled = await db.startTransaction().execute();
      await store.append([event('controlled')], { tx: controlled });
      await controlled.rollback().execute();
      expect(await count('controlled')).toBe(0);
      expect((await refused(controlled)).message).toMatch(/already committed or rolled back/);
    });

    it('refuses the root db, an ended transaction, another db’s, and a mysql2 connection', async () => {
      expect((await refused(db)).message).toMatch(/options\.tx.*outside any transaction/s);
      let ended: unknown;
      await db.transaction().execute(async (trx) => {
        ended = trx;
      });
      expect((await refused(ended)).message).toMatch(/options\.tx.*already committed/s);
      const other = openKyselyMysql(1);
      try {
        await other.db.transaction().execute(async (trx) => {
          expect((await refused(trx)).message).toMatch(/another Kysely instance/);
        });
      } finally {
        await other.db.destroy();
      }
      const conn = await promisePool.getConnection();
      try {
        await conn.beginTransaction();
        expect(await refused(conn)).toBeInstanceOf(OutboxValidationError);
        expect((await refused(conn)).message).toMatch(/not a Kysely Transaction/);
        await conn.rollback();
      } finally {
        conn.release();
      }
      expect(await count('refused')).toBe(0);
    });

    it('refuses a transaction open on a connection the server sees outside it', async () => {
      await db.transaction().execute(async (trx) => {
        // A COMMIT by hand ends the server's transaction under Kysely's.
        await sql`COMMIT`.execute(trx);
        expect((await refused(trx)).message).toMatch(/not inside an open transaction/);
      });
    });

    it('errors keep mysql2’s errno and code, in a caller’s transaction and outside', async () => {
      const executor = kyselyExecutor(db, { pool });
      const missing = { text: 'SELECT * FROM nowhere_ckym', params: [] };
      const fields = { errno: 1146, code: 'ER_NO_SUCH_TABLE' };
      await expect(executor.query(missing)).rejects.toMatchObject(fields);
      await db.transaction().execute(async (trx) => {
        const { connection } = await executor.transactionOf(trx);
        await expect(connection.query(missing)).rejects.toMatchObject(fields);
      });
    });

    it('clientTransaction runs in Kysely’s own transaction; ownsClient is the db', async () => {
      const executor = kyselyExecutor(db, { pool });
      expect(executor.dialect).toBe('mysql');
      expect(await executor.serverFlavor?.()).toBe('mariadb');
      expect(executor.ownsClient(db)).toBe(true);
      expect(executor.ownsClient(pool)).toBe(false);
      const failed = await executor
        .clientTransaction(
          async (tx, connection) => {
            expect((tx as Kysely<any>).isTransaction).toBe(true);
            await store.append([event('client-tx')], { tx });
            // The server lists the transaction (and its isolation) once it touched a table.
            const { rows } = await connection.query({
              text: 'SELECT trx_isolation_level AS i FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = CONNECTION_ID()',
              params: [],
            });
            expect(rows[0].i).toBe('READ COMMITTED');
            throw new Error('roll back');
          },
          { isolation: 'READ COMMITTED' },
        )
        .catch((e: Error) => e);
      expect(failed.message).toBe('roll back');
      expect(await count('client-tx')).toBe(0);
      await executor.clientTransaction(async (tx) => {
        await store.append([event('client-commit')], { tx });
      });
      expect(await count('client-commit')).toBe(1);
    });

    it('refuses a pool other than the dialect’s, at the first transaction', async () => {
      const stranger = openMysqlPool(1);
      try {
        const wrong = new SqlOutboxStore(kyselyExecutor(db, { pool: stranger }), {
          tablePrefix: prefix,
        });
        const error = await db
          .transaction()
          .execute((trx) => wrong.append([event('wrong-pool')], { tx: trx }))
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(OutboxOptionsError);
        expect((error as Error).message).toMatch(/not in the pool given to kyselyExecutor/);
      } finally {
        await stranger.end();
      }
    });
  });
});

describeWithService('mariadb', 'kyselyExecutor(db) on MysqlDialect: options', () => {
  it('needs the mysql2 pool given to MysqlDialect, and the root db', async () => {
    const { db, promisePool } = openKyselyMysql(1);
    try {
      expect(() => kyselyExecutor(db)).toThrow(
        /store\.executor.*mysql2 pool given to Kysely.*no pool/s,
      );
      expect(() => kyselyExecutor(db, { pool: {} })).toThrow(/a plain object/);
      expect(kyselyExecutor(db, { pool: promisePool }).dialect).toBe('mysql');
      await db.transaction().execute(async (trx) => {
        expect(() => kyselyExecutor(trx, { pool: promisePool })).toThrow(/root Kysely instance/);
      });
    } finally {
      await db.destroy();
    }
  });
});
