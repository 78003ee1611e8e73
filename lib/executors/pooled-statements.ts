import type {
  SqlConnection,
  SqlExecutor,
  SqlIsolationLevel,
  SqlRows,
  SqlStatement,
} from './sql-executor';

/**
 * The part of an executor over an ORM or query builder that runs the store's own statements: on
 * the pool under the client, through the driver's executor (`pgExecutor`, `mysql2Executor`), so
 * they read results as the dialects expect and need nothing of the ORM. What differs per client
 * (its transaction object, `clientTransaction`, `ownsClient`) stays in the subclass.
 */
export abstract class PooledStatements<Pooled extends SqlExecutor = SqlExecutor> {
  constructor(protected readonly pooled: Pooled) {}

  query(statement: SqlStatement): Promise<SqlRows> {
    return this.pooled.query(statement);
  }

  connection<T>(fn: (connection: SqlConnection) => Promise<T>): Promise<T> {
    return this.pooled.connection(fn);
  }

  transaction<T>(
    fn: (connection: SqlConnection) => Promise<T>,
    options?: { isolation?: SqlIsolationLevel },
  ): Promise<T> {
    return this.pooled.transaction(fn, options);
  }
}
