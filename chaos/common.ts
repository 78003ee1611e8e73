/**
 * Shared by the chaos driver and its workers: connection options, table names and the event type.
 * Databases come from the same environment variables as the test suite (PGDATABASE, MYSQL_DATABASE…).
 */
import { DataSourceOptions } from 'typeorm';

export type ChaosStore = 'postgres' | 'mariadb' | 'redis';

export const LEDGER_TYPE = 'ledger.entry';
export const LEDGER_HANDLER = 'Ledger.apply';

/** SQL dialect holding the ledger and inbox tables: Redis runs keep them on PostgreSQL. */
export function sqlDialectOf(store: ChaosStore): 'postgres' | 'mariadb' {
  return store === 'mariadb' ? 'mariadb' : 'postgres';
}

export function chaosDataSourceOptions(
  dialect: 'postgres' | 'mariadb',
  poolSize: number,
  applicationName?: string,
): DataSourceOptions {
  if (dialect === 'postgres') {
    return {
      type: 'postgres',
      host: process.env.PGHOST ?? '127.0.0.1',
      port: Number(process.env.PGPORT ?? 5432),
      username: process.env.PGUSER ?? 'postgres',
      password: process.env.PGPASSWORD,
      database: process.env.PGDATABASE ?? 'test',
      applicationName,
      extra: { max: poolSize },
    };
  }
  return {
    type: 'mariadb',
    host: process.env.MYSQL_HOST ?? '127.0.0.1',
    port: Number(process.env.MYSQL_PORT ?? 3306),
    username: process.env.MYSQL_USER ?? 'root',
    password: process.env.MYSQL_PASSWORD ?? '',
    database: process.env.MYSQL_DATABASE ?? 'test',
    extra: { connectionLimit: poolSize },
  };
}

export function redisUrl(port = process.env.REDIS_PORT ?? '6379'): string {
  return `redis://${process.env.REDIS_HOST ?? '127.0.0.1'}:${port}`;
}

export function quoteName(dialect: 'postgres' | 'mariadb', name: string): string {
  return dialect === 'mariadb' ? `\`${name}\`` : `"${name}"`;
}

export function ledgerTable(dialect: 'postgres' | 'mariadb', prefix: string): string {
  return quoteName(dialect, `${prefix}ledger`);
}

/** What a worker reports over IPC (its counters since it started). */
export interface WorkerReport {
  op: 'stats';
  claimed: number;
  succeeded: number;
  failed: number;
  leaseLost: number;
  storeErrors: number;
  inboxProcessed: number;
  inboxDuplicates: number;
}
