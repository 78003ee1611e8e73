import { PrismaMariaDb } from '@prisma/adapter-mariadb';
import { PrismaClient } from '../../fixtures/prisma-mysql/generated/client';
import { mysqlConnectionOptions } from './mysql2-test-helpers';

/** A PrismaClient of the MySQL test schema (test/fixtures/prisma-mysql) over @prisma/adapter-mariadb. */
export function openPrismaMariaDb(): PrismaClient {
  return new PrismaClient({
    adapter: new PrismaMariaDb({ ...mysqlConnectionOptions, connectionLimit: 5 }),
  });
}

export { PrismaClient };
