import type { SqlExecutor } from '../../executors/sql-executor';

/**
 * PostgreSQL (or, with later executors, MySQL/MariaDB and SQLite) through a client other than
 * TypeORM: the executor carries the statements, e.g. `pgExecutor(pool)` for node-postgres.
 */
export interface SqlStoreOptions {
  type: 'sql';
  /** The client's executor: `pgExecutor(pool)`. */
  executor: SqlExecutor;
  /**
   * Prefix of the outbox tables: letters, digits and underscores, at most 40 characters.
   * @default 'outbox_'
   */
  tablePrefix?: string;
  /** PostgreSQL schema of the outbox tables. @default the connection's search path */
  schema?: string;
  /** Create the tables at bootstrap if missing. @default false in production, true otherwise */
  ensureSchema?: boolean;
  /**
   * PostgreSQL: keep the claim, ack and append prepared per connection. Set `false` behind a
   * pooler that does not support named prepared statements. @default true
   */
  preparedStatements?: boolean;
}
