import { afterAll, beforeAll } from '@jest/globals';
import { Kysely } from 'kysely';
import { Pool } from 'pg';
import { describeOutboxStoreContract } from 'nestjs-outbox/testing';
import { describeWithService } from '../../support/services';
import { uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { kyselyStoreFor, openKysely } from './kysely-test-helpers';

/** The shared contract, unchanged, on PostgreSQL through Kysely (no TypeORM). */
describeWithService('postgres', 'sql store through kyselyExecutor', () => {
  let db: Kysely<any>;
  let pool: Pool;
  let tables: Awaited<ReturnType<typeof kyselyStoreFor>>;
  beforeAll(async () => {
    ({ db, pool } = openKysely());
    tables = await kyselyStoreFor(db, pool, uniquePrefix('cky'));
  });
  afterAll(async () => {
    await tables?.store.close();
    await tables?.drop();
    await db?.destroy();
  });
  describeOutboxStoreContract(
    'sql store (Kysely)',
    async () => {
      await tables.empty();
      return { store: tables.store };
    },
    { leaseMs: 400 },
  );
});
