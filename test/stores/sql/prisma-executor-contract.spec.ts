import { afterAll, beforeAll } from '@jest/globals';
import { Pool } from 'pg';
import { prismaExecutor } from 'nestjs-outbox';
import { describeOutboxStoreContract } from 'nestjs-outbox/testing';
import { SqlOutboxStore } from '../../../lib/stores/typeorm/internal';
import { describeWithService } from '../../support/services';
import { uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { openPool, pgStoreFor } from './pg-test-helpers';
import { openPrisma, PrismaClient } from './prisma-test-helpers';

/** The shared contract, unchanged, on PostgreSQL through Prisma 7 (@prisma/adapter-pg). */
describeWithService('postgres', 'sql store through prismaExecutor', () => {
  const prefix = uniquePrefix('cpr');
  let pool: Pool;
  let prisma: PrismaClient;
  let tables: Awaited<ReturnType<typeof pgStoreFor>>;
  let store: SqlOutboxStore;
  beforeAll(async () => {
    pool = openPool();
    tables = await pgStoreFor(pool, prefix);
    await tables.store.close();
    prisma = openPrisma();
    store = new SqlOutboxStore(prismaExecutor(prisma), { tablePrefix: prefix });
  });
  afterAll(async () => {
    await store?.close();
    await tables?.drop();
    await prisma?.$disconnect();
    await pool?.end();
  });
  describeOutboxStoreContract(
    'sql store (Prisma)',
    async () => {
      await tables.empty();
      return { store };
    },
    { leaseMs: 400 },
  );
});
