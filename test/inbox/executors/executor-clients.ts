import { sql as drizzleSql } from 'drizzle-orm';
import { drizzle, NodePgDatabase } from 'drizzle-orm/node-postgres';
import { Kysely, sql as kyselySql } from 'kysely';
import type { PoolConnection } from 'mysql2/promise';
import { PoolClient } from 'pg';
import { DataSource, EntityManager } from 'typeorm';
import {
  drizzleExecutor,
  kyselyExecutor,
  mikroOrmExecutor,
  mysql2Executor,
  pgExecutor,
  prismaExecutor,
  SqlExecutor,
} from '../../../lib/executors';
import { TypeOrmExecutor } from '../../../lib/executors/typeorm-executor';
import { openKysely } from '../../stores/sql/kysely-test-helpers';
import { openOrm } from '../../stores/sql/mikro-orm-test-helpers';
import { openMysqlPool } from '../../stores/sql/mysql2-test-helpers';
import { openPrisma } from '../../stores/sql/prisma-test-helpers';
import { openPool } from '../../stores/sql/pg-test-helpers';
import { openDataSource } from '../../stores/typeorm/typeorm-test-helpers';

/**
 * One PostgreSQL client behind an executor, and how the app writes through that client's
 * transaction object (what `@InboxTx()` injects): the specs here run once per client.
 */
export interface ExecutorClient {
  name: 'node-postgres' | 'Drizzle' | 'Kysely' | 'Prisma' | 'MikroORM' | 'mysql2' | 'TypeORM';
  executor: SqlExecutor;
  /** The object the app built the executor from (`ownsClient` says yes to it). */
  client: unknown;
  /** Runs `text` through the client's own API on its transaction object; returns the rows. */
  run(tx: unknown, text: string): Promise<Array<Record<string, any>>>;
  /** Runs `text` outside any transaction. */
  query(text: string): Promise<Array<Record<string, any>>>;
  close(): Promise<void>;
}

export type ExecutorClientName = ExecutorClient['name'];

export async function openExecutorClient(
  name: ExecutorClientName,
  max = 10,
): Promise<ExecutorClient> {
  switch (name) {
    case 'node-postgres': {
      const pool = openPool(max);
      return {
        name,
        executor: pgExecutor(pool),
        client: pool,
        run: async (tx, text) => (await (tx as PoolClient).query(text)).rows,
        query: async (text) => (await pool.query(text)).rows,
        close: () => pool.end(),
      };
    }
    case 'Drizzle': {
      const pool = openPool(max);
      const db = drizzle({ client: pool });
      return {
        name,
        executor: drizzleExecutor(db),
        client: db,
        run: async (tx, text) =>
          (await (tx as NodePgDatabase).execute(drizzleSql.raw(text))).rows as Array<
            Record<string, any>
          >,
        query: async (text) => (await pool.query(text)).rows,
        close: () => pool.end(),
      };
    }
    case 'Kysely': {
      const { db, pool } = openKysely(max);
      return {
        name,
        executor: kyselyExecutor(db, { pool }),
        client: db,
        run: async (tx, text) =>
          (await kyselySql.raw<Record<string, any>>(text).execute(tx as Kysely<any>)).rows,
        query: async (text) => (await pool.query(text)).rows,
        close: () => db.destroy(),
      };
    }
    case 'Prisma': {
      const pool = openPool(max);
      const prisma = openPrisma(pool);
      type RawClient = {
        $queryRawUnsafe(text: string): Promise<Array<Record<string, any>>>;
        $executeRawUnsafe(text: string): Promise<number>;
      };
      const run = async (on: RawClient, text: string) => {
        if (/^\s*select/i.test(text)) return on.$queryRawUnsafe(text);
        await on.$executeRawUnsafe(text);
        return [];
      };
      return {
        name,
        executor: prismaExecutor(prisma),
        client: prisma,
        run: (tx, text) => run(tx as RawClient, text),
        query: async (text) => (await pool.query(text)).rows,
        close: async () => {
          await prisma.$disconnect();
          await pool.end();
        },
      };
    }
    case 'MikroORM': {
      const prefix = `ixmk_${process.pid}_`;
      const orm = await openOrm(prefix, max);
      type Em = {
        getConnection(): {
          execute(text: string, params: unknown[], method: 'all', ctx?: unknown): Promise<any>;
        };
        getTransactionContext(): unknown;
      };
      const run = async (em: Em, text: string, ctx?: unknown) =>
        (await em.getConnection().execute(text, [], 'all', ctx)) as Array<Record<string, any>>;
      return {
        name,
        executor: mikroOrmExecutor(orm),
        client: orm,
        run: (tx, text) => run(tx as Em, text, (tx as Em).getTransactionContext()),
        query: (text) => run(orm.em as unknown as Em, text),
        close: async () => {
          await run(orm.em as unknown as Em, `DROP TABLE IF EXISTS ${prefix}orders`);
          await orm.close(true);
        },
      };
    }
    case 'mysql2': {
      const pool = openMysqlPool(max);
      const rows = (result: unknown) =>
        (Array.isArray(result) ? result : []) as Array<Record<string, any>>;
      return {
        name,
        executor: mysql2Executor(pool),
        client: pool,
        run: async (tx, text) => rows((await (tx as PoolConnection).query(text))[0]),
        query: async (text) => rows((await pool.query(text))[0]),
        close: () => pool.end(),
      };
    }
    case 'TypeORM': {
      const dataSource: DataSource = await openDataSource('postgres');
      return {
        name,
        executor: new TypeOrmExecutor(dataSource),
        client: dataSource,
        run: (tx, text) => (tx as EntityManager).query(text),
        query: (text) => dataSource.query(text),
        close: () => dataSource.destroy(),
      };
    }
  }
}

/** The clients whose executors are not TypeORM (the new paths of `@Inbox()`). */
export const SQL_CLIENTS: ExecutorClientName[] = ['node-postgres', 'Drizzle', 'Kysely'];

/** Every non-TypeORM client on PostgreSQL, for the app spec of `@Inbox()`. */
export const INBOX_APP_CLIENTS: ExecutorClientName[] = [...SQL_CLIENTS, 'Prisma', 'MikroORM'];
