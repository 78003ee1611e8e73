import type { DataSource } from 'typeorm';
import { OutboxOptionsError } from '../../../errors/outbox-options.error';
import { OutboxTableNames, OutboxTableOptions, tableNames } from '../schema/tables';
import { mysqlDdl, mysqlTextCollation } from './mysql/ddl';
import { MysqlDialect } from './mysql/dialect';
import { postgresDdl } from './postgres/ddl';
import { PostgresDialect } from './postgres/dialect';
import { DialectName, SqlDialect } from './sql-dialect';
import { sqliteDdl } from './sqlite/ddl';
import { SqliteDialect } from './sqlite/dialect';

/** Maps a TypeORM driver type to the dialect that handles it. */
export function dialectName(type: unknown): DialectName {
  switch (type) {
    case 'postgres':
      return 'postgres';
    case 'mysql':
    case 'mariadb':
      return 'mysql';
    case 'better-sqlite3':
    case 'sqlite':
      return 'sqlite';
    default:
      throw new OutboxOptionsError(
        'store.dataSource',
        `the TypeORM driver "${String(type)}" is not supported by the outbox; use postgres, mysql, mariadb or better-sqlite3`,
      );
  }
}

export function outboxTableNames(name: DialectName, options: OutboxTableOptions): OutboxTableNames {
  return name === 'mysql'
    ? tableNames(options, '`', false)
    : tableNames(options, '"', name === 'postgres');
}

/**
 * DDL for a dialect without a connection (the CLI's `schema sql`). `server` tells MySQL from
 * MariaDB (`'mysql'`, `'mariadb'` or a `VERSION()` string; default MariaDB's collation names).
 */
export function schemaStatements(
  name: DialectName,
  options: OutboxTableOptions,
  server = 'mariadb',
): { create: string[]; drop: string[]; upgrade: string[] } {
  const tables = outboxTableNames(name, options);
  return name === 'postgres'
    ? postgresDdl(tables)
    : name === 'mysql'
      ? mysqlDdl(tables, mysqlTextCollation(server))
      : sqliteDdl(tables);
}

export function createDialect(
  dataSource: DataSource,
  options: OutboxTableOptions & { preparedStatements?: boolean },
): SqlDialect {
  const name = dialectName(dataSource.options.type);
  const ctx = {
    dataSource,
    tables: outboxTableNames(name, options),
    preparedStatements: options.preparedStatements ?? true,
  };
  if (name === 'postgres') return new PostgresDialect(ctx);
  if (name === 'mysql') return new MysqlDialect(ctx);
  return new SqliteDialect(ctx);
}
