import { Kysely, MysqlDialect, PostgresDialect } from 'kysely';
import { createPool as createMysqlPool } from 'mysql2';
import { Pool } from 'pg';
import { kyselyExecutor } from '../../../lib/executors';
import { createDialect } from '../../../lib/stores/typeorm/dialects';
import { ensureOutboxSchema, SqlOutboxStore } from '../../../lib/stores/typeorm/internal';
import { mysqlConnectionOptions } from './mysql2-test-helpers';
import { openPool } from './pg-test-helpers';

/** A Kysely on PostgreSQL over its own pg Pool (both returned: Kysely does not expose its pool). */
export function openKysely(max = 10): { db: Kysely<any>; pool: Pool } {
  const pool = openPool(max);
  return { db: new Kysely<any>({ dialect: new PostgresDialect({ pool }) }), pool };
}

/** Creates the outbox tables for `prefix` through the Kysely executor; a store and helpers on them. */
export async function kyselyStoreFor(db: Kysely<any>, pool: Pool, prefix: string) {
  const executor = kyselyExecutor(db, { pool });
  await ensureOutboxSchema(executor, { tablePrefix: prefix });
  const store = new SqlOutboxStore(executor, { tablePrefix: prefix });
  const { tables } = createDialect(executor, { tablePrefix: prefix });
  return {
    executor,
    store,
    tables,
    async empty(): Promise<void> {
      await pool.query(`DELETE FROM ${tables.deliveries.text}`);
      await pool.query(`DELETE FROM ${tables.deadLetters.text}`);
      await pool.query(`DELETE FROM ${tables.events.text}`);
    },
    async drop(): Promise<void> {
      for (const ddl of createDialect(executor, { tablePrefix: prefix }).dropSchema()) {
        await pool.query(ddl);
      }
    },
  };
}

/**
 * A Kysely on MariaDB (`MysqlDialect`) over its own mysql2 pool (the callback pool Kysely takes,
 * and its promise API for the tests' own queries).
 */
export function openKyselyMysql(connectionLimit = 10) {
  const pool = createMysqlPool({ ...mysqlConnectionOptions, connectionLimit });
  const db = new Kysely<any>({ dialect: new MysqlDialect({ pool }) });
  return { db, pool, promisePool: pool.promise() };
}
