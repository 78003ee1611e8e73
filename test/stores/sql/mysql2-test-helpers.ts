import { createPool, Pool } from 'mysql2/promise';
import { mysql2Executor } from '../../../lib/executors';
import { createDialect } from '../../../lib/stores/typeorm/dialects';
import { ensureOutboxSchema, SqlOutboxStore } from '../../../lib/stores/typeorm/internal';
import { SERVICES } from '../../support/services';

export const mysqlConnectionOptions = {
  host: SERVICES.mariadb.host,
  port: SERVICES.mariadb.port,
  user: process.env.MYSQL_USER ?? 'root',
  password: process.env.MYSQL_PASSWORD ?? '',
  database: process.env.MYSQL_DATABASE ?? 'test',
};

export function openMysqlPool(connectionLimit = 10): Pool {
  return createPool({ ...mysqlConnectionOptions, connectionLimit });
}

/** Creates the outbox tables for `prefix` through the mysql2 executor; a store and helpers on them. */
export async function mysql2StoreFor(pool: Pool, prefix: string) {
  const executor = mysql2Executor(pool);
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
