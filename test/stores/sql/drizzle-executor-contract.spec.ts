import { afterAll, beforeAll } from '@jest/globals';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Pool } from 'pg';
import { drizzleExecutor } from 'nestjs-outbox';
import { describeOutboxStoreContract } from 'nestjs-outbox/testing';
import { SqlOutboxStore } from '../../../lib/stores/typeorm/internal';
import { describeWithService } from '../../support/services';
import { uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { openPool, pgStoreFor } from './pg-test-helpers';

/** The shared contract, unchanged, on PostgreSQL through Drizzle (drizzle-orm/node-postgres). */
describeWithService('postgres', 'sql store through drizzleExecutor', () => {
  const prefix = uniquePrefix('cdz');
  let pool: Pool;
  let tables: Awaited<ReturnType<typeof pgStoreFor>>;
  let store: SqlOutboxStore;
  beforeAll(async () => {
    pool = openPool();
    tables = await pgStoreFor(pool, prefix);
    await tables.store.close();
    store = new SqlOutboxStore(drizzleExecutor(drizzle({ client: pool })), {
      tablePrefix: prefix,
    });
  });
  afterAll(async () => {
    await store?.close();
    await tables?.drop();
    await pool?.end();
  });
  describeOutboxStoreContract(
    'sql store (Drizzle)',
    async () => {
      await tables.empty();
      return { store };
    },
    { leaseMs: 400 },
  );
});
