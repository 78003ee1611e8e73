import type { PGlite } from '@electric-sql/pglite';
import { pgliteExecutor } from '../../../lib/executors';
import { createDialect } from '../../../lib/stores/typeorm/dialects';
import { ensureOutboxSchema, SqlOutboxStore } from '../../../lib/stores/typeorm/internal';

/**
 * A PGlite database in this process. Creating one runs initdb in WASM: seconds on a busy
 * machine, so each spec creates one in `beforeAll` with this timeout.
 */
export const PGLITE_START_MS = 180_000;

export async function openPglite(): Promise<PGlite> {
  const { PGlite } = require('@electric-sql/pglite') as typeof import('@electric-sql/pglite');
  return PGlite.create();
}

/** Creates the outbox tables for `prefix` through the PGlite executor; a store and helpers on them. */
export async function pgliteStoreFor(pg: PGlite, prefix: string) {
  const executor = pgliteExecutor(pg);
  await ensureOutboxSchema(executor, { tablePrefix: prefix });
  const store = new SqlOutboxStore(executor, { tablePrefix: prefix });
  const { tables } = createDialect(executor, { tablePrefix: prefix });
  return {
    executor,
    store,
    async empty(): Promise<void> {
      await pg.query(`DELETE FROM ${tables.deliveries.text}`);
      await pg.query(`DELETE FROM ${tables.deadLetters.text}`);
      await pg.query(`DELETE FROM ${tables.events.text}`);
    },
  };
}
