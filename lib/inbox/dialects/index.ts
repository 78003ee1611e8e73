import { OutboxOptionsError } from '../../errors/outbox-options.error';
import type { SqlExecutor } from '../../executors/sql-executor';
import { typeOrmDataSourceOf } from '../../executors/typeorm-executor';
import { InboxDialect } from './inbox-dialect';
import { mysqlInboxDialect } from './mysql';
import { postgresInboxDialect } from './postgres';
import { sqliteInboxDialect } from './sqlite';

export type { InboxDialect, InboxStatement, InboxTable } from './inbox-dialect';
export { IDENTIFIER } from './inbox-dialect';

const BY_DRIVER: Record<string, InboxDialect> = {
  postgres: postgresInboxDialect,
  'aurora-postgres': postgresInboxDialect,
  mysql: mysqlInboxDialect,
  mariadb: mysqlInboxDialect,
  'aurora-mysql': mysqlInboxDialect,
  'better-sqlite3': sqliteInboxDialect,
  sqlite: sqliteInboxDialect,
};

/** Picks the inbox SQL for a TypeORM DataSource's `options.type`. */
export function inboxDialectFor(type: string, field = 'inbox.dataSource'): InboxDialect {
  const dialect = BY_DRIVER[type];
  if (!dialect) {
    throw new OutboxOptionsError(
      field,
      `the inbox supports PostgreSQL, MySQL/MariaDB and SQLite (better-sqlite3) DataSources, not "${type}"`,
    );
  }
  return dialect;
}

/**
 * Picks the inbox SQL for an executor. SQLite runs the inbox only through TypeORM: its one shared
 * connection is what the inbox's queue of transactions is built for (`serialTransactions`).
 */
export function inboxDialectOf(executor: SqlExecutor, field = 'inbox.executor'): InboxDialect {
  const dataSource = typeOrmDataSourceOf(executor);
  if (dataSource) return inboxDialectFor(String(dataSource.options.type), field);
  if (executor.dialect === 'sqlite') {
    throw new OutboxOptionsError(
      field,
      `the inbox runs on SQLite only through TypeORM (a better-sqlite3 DataSource), not ${executor.client}`,
    );
  }
  return executor.dialect === 'postgres' ? postgresInboxDialect : mysqlInboxDialect;
}
