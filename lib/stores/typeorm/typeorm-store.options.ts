/** PostgreSQL, MySQL/MariaDB or SQLite through a TypeORM DataSource. */
export interface TypeOrmStoreOptions {
  type: 'typeorm';
  /** The TypeORM `DataSource` whose transactions events join. */
  dataSource?: unknown;
  /** Injection token of the DataSource (e.g. from `@nestjs/typeorm`'s `getDataSourceToken()`). */
  dataSourceToken?: string | symbol | Function;
  /**
   * Prefix of the outbox tables: letters, digits and underscores, at most 40 characters.
   * @default 'outbox_'
   */
  tablePrefix?: string;
  /** PostgreSQL schema of the outbox tables (ignored elsewhere). @default the connection's search path */
  schema?: string;
  /** Create the tables at bootstrap if missing. @default false in production, true otherwise */
  ensureSchema?: boolean;
  /**
   * PostgreSQL: keep the claim, ack and append prepared per connection. Set `false` behind a
   * pooler that does not support named prepared statements (PgBouncer in transaction mode before
   * 1.21). @default true
   */
  preparedStatements?: boolean;
}
