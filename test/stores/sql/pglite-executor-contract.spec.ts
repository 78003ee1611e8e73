import { afterAll, beforeAll, describe } from '@jest/globals';
import type { PGlite } from '@electric-sql/pglite';
import { describeOutboxStoreContract } from 'nestjs-outbox/testing';
import { openPglite, PGLITE_START_MS, pgliteStoreFor } from './pglite-test-helpers';

/**
 * The shared contract, unchanged, on PGlite (PostgreSQL in WASM, in this process, one
 * connection): the concurrent claims and appends of the contract run one after another there,
 * which is what PGlite offers an app's tests.
 */
describe('sql store through pgliteExecutor', () => {
  let pg: PGlite;
  let tables: Awaited<ReturnType<typeof pgliteStoreFor>>;
  beforeAll(async () => {
    pg = await openPglite();
    tables = await pgliteStoreFor(pg, 'pgl_');
  }, PGLITE_START_MS);
  afterAll(async () => {
    await tables?.store.close();
    await pg?.close();
  });
  describeOutboxStoreContract(
    'sql store (PGlite)',
    async () => {
      await tables.empty();
      return { store: tables.store };
    },
    { leaseMs: 400 },
  );
});
