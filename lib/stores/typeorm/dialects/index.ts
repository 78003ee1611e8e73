import type { DataSource } from 'typeorm';
import { isSqlExecutor, SqlExecutor } from '../../../executors/sql-executor';
import { dialectName, TypeOrmExecutor } from '../../../executors/typeorm-executor';
import { OutboxTableNames, OutboxTableOptions, tableNames } from '../schema/tables';
import { mysqlDdl, mysqlTextCollation } from './mysql/ddl';
import { MysqlDialect } from './mysql/dialect';
import { postgresDdl } from './postgres/ddl';
import { PostgresDialect } from './postgres/dialect';
import { DialectName, SchemaDdl, SqlDialect } from './sql-dialect';
import { sqliteDdl } from './sqlite/ddl';
import { SqliteDialect } from './sqlite/dialect';

export { dialectName };

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
): SchemaDdl {
  const tables = outboxTableNames(name, options);
  return name === 'postgres'
    ? postgresDdl(tables)
    : name === 'mysql'
      ? mysqlDdl(tables, mysqlTextCollation(server))
      : sqliteDdl(tables);
}

/** The dialect of the database behind a TypeORM DataSource or an executor. */
export function createDialect(
  source: DataSource | SqlExecutor,
  options: OutboxTableOptions & { preparedStatements?: boolean },
): SqlDialect {
  const executor = isSqlExecutor(source) ? source : new TypeOrmExecutor(source);
  const name = executor.dialect;
  const ctx = {
    executor,
    tables: outboxTableNames(name, options),
    preparedStatements: options.preparedStatements ?? true,
  };
  if (name === 'postgres') return new PostgresDialect(ctx);
  if (name === 'mysql') return new MysqlDialect(ctx);
  return new SqliteDialect(ctx);
}
