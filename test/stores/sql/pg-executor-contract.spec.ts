import { afterAll, beforeAll } from '@jest/globals';
import { Pool } from 'pg';
import { describeOutboxStoreContract } from 'nestjs-outbox/testing';
import { describeWithService } from '../../support/services';
import { uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { openPool, pgStoreFor } from './pg-test-helpers';

/** The shared contract, unchanged, on PostgreSQL through node-postgres (no TypeORM). */
describeWithService('postgres', 'sql store through pgExecutor', () => {
  let pool: Pool;
  let tables: Awaited<ReturnType<typeof pgStoreFor>>;
  beforeAll(async () => {
    pool = openPool();
    tables = await pgStoreFor(pool, uniquePrefix('cpg'));
  });
  afterAll(async () => {
    await tables?.store.close();
    await tables?.drop();
    await pool?.end();
  });
  describeOutboxStoreContract(
    'sql store (node-postgres)',
    async () => {
      await tables.empty();
      return { store: tables.store };
    },
    { leaseMs: 400 },
  );
});
