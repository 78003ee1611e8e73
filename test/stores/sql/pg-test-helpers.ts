import { Pool } from 'pg';
import { pgExecutor } from '../../../lib/executors';
import { createDialect } from '../../../lib/stores/typeorm/dialects';
import { ensureOutboxSchema, SqlOutboxStore } from '../../../lib/stores/typeorm/internal';
import { SERVICES } from '../../support/services';

export function openPool(max = 10): Pool {
  return new Pool({
    host: SERVICES.postgres.host,
    port: SERVICES.postgres.port,
    user: process.env.PGUSER ?? 'postgres',
    password: process.env.PGPASSWORD,
    database: process.env.PGDATABASE ?? 'test',
    max,
  });
}

/** Creates the outbox tables for `prefix` through the pg executor; a store and helpers on them. */
export async function pgStoreFor(pool: Pool, prefix: string) {
  const executor = pgExecutor(pool);
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
