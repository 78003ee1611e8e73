import { afterAll, beforeAll } from '@jest/globals';
import type { Pool } from 'mysql2/promise';
import { describeOutboxStoreContract } from 'nestjs-outbox/testing';
import { describeWithService } from '../../support/services';
import { uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { mysql2StoreFor, openMysqlPool } from './mysql2-test-helpers';

/** The shared contract, unchanged, on MariaDB through mysql2 (no TypeORM). */
describeWithService('mariadb', 'sql store through mysql2Executor', () => {
  let pool: Pool;
  let tables: Awaited<ReturnType<typeof mysql2StoreFor>>;
  beforeAll(async () => {
    pool = openMysqlPool();
    tables = await mysql2StoreFor(pool, uniquePrefix('cmy2'));
  });
  afterAll(async () => {
    await tables?.store.close();
    await tables?.drop();
    await pool?.end();
  });
  describeOutboxStoreContract(
    'sql store (mysql2)',
    async () => {
      await tables.empty();
      return { store: tables.store };
    },
    { leaseMs: 400 },
  );
});
