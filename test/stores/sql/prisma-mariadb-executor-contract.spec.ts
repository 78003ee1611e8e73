import { afterAll, beforeAll } from '@jest/globals';
import type { Pool } from 'mysql2/promise';
import { prismaExecutor } from 'nestjs-outbox';
import { describeOutboxStoreContract } from 'nestjs-outbox/testing';
import { SqlOutboxStore } from '../../../lib/stores/typeorm/internal';
import { describeWithService } from '../../support/services';
import { uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { mysql2StoreFor, openMysqlPool } from './mysql2-test-helpers';
import { openPrismaMariaDb, PrismaClient } from './prisma-mariadb-test-helpers';

/** The shared contract, unchanged, on MariaDB through Prisma 7 (@prisma/adapter-mariadb). */
describeWithService('mariadb', 'sql store through prismaExecutor on MariaDB', () => {
  const prefix = uniquePrefix('pmaria_c');
  let pool: Pool;
  let prisma: PrismaClient;
  let tables: Awaited<ReturnType<typeof mysql2StoreFor>>;
  let store: SqlOutboxStore;
  beforeAll(async () => {
    pool = openMysqlPool(2);
    tables = await mysql2StoreFor(pool, prefix);
    await tables.store.close();
    prisma = openPrismaMariaDb();
    store = new SqlOutboxStore(prismaExecutor(prisma), { tablePrefix: prefix });
  });
  afterAll(async () => {
    await store?.close();
    await tables?.drop();
    await prisma?.$disconnect();
    await pool?.end();
  });
  describeOutboxStoreContract(
    'sql store (Prisma, MariaDB)',
    async () => {
      await tables.empty();
      return { store };
    },
    { leaseMs: 400 },
  );
});
