import { PrismaPg } from '@prisma/adapter-pg';
import { Pool } from 'pg';
import { PrismaClient } from '../../fixtures/prisma/generated/client';
import { SERVICES } from '../../support/services';

/** The test database's connection options, as `new PrismaPg(config)` and `new Pool(config)` take them. */
export function pgConfig() {
  return {
    host: SERVICES.postgres.host,
    port: SERVICES.postgres.port,
    user: process.env.PGUSER ?? 'postgres',
    password: process.env.PGPASSWORD,
    database: process.env.PGDATABASE ?? 'test',
  };
}

/** A PrismaClient of the test schema (test/fixtures/prisma) over @prisma/adapter-pg. */
export function openPrisma(pool?: Pool): PrismaClient {
  return new PrismaClient({ adapter: new PrismaPg(pool ?? pgConfig()) });
}

export { PrismaClient };
