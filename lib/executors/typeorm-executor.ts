import type { DataSource, QueryRunner } from 'typeorm';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxValidationError } from '../errors/outbox-validation.error';
import {
  CallerTransaction,
  CommitHooks,
  describeValue,
  ListenerConnection,
  MysqlServerFlavor,
  SqlConnection,
  SqlExecutor,
  SqlIsolationLevel,
  SqlExecutorDialect,
  SqlRows,
  SqlStatement,
} from './sql-executor';

/** Maps a TypeORM driver type to the dialect that handles it. */
export function dialectName(type: unknown): SqlExecutorDialect {
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

/** The part of a `pg` client the prepared path uses. */
interface PgClient {
  query(config: { name: string; text: string; values: unknown[] }): Promise<{
    rows?: Array<Record<string, any>>;
    rowCount?: number | null;
  }>;
}

/** The callback API of the mysql2 connection under a TypeORM MySQL query runner. */
interface Mysql2Connection {
  query(
    text: string,
    params: unknown[],
    callback: (error: unknown, result: unknown) => void,
  ): unknown;
}

/** The pg module TypeORM loaded for a PostgreSQL DataSource. */
type PgClientClass = new (config: Record<string, unknown>) => unknown;

/** Statements on one TypeORM query runner (pooled, the executor's transaction, or the caller's). */
export class TypeOrmConnection implements SqlConnection {
  constructor(readonly runner: QueryRunner) {}

  async query(statement: SqlStatement): Promise<SqlRows> {
    const params = statement.params as unknown[];
    if (statement.name !== undefined) return this.prepared(statement.name, statement.text, params);
    const result = (await this.runner.query(statement.text, params, true)) as
      { records?: unknown[]; affected?: number } | unknown[];
    // (A bare array: a stand-in runner of a test answering like the unstructured form.)
    if (Array.isArray(result)) return { rows: result as SqlRows['rows'], affected: result.length };
    return { rows: (result.records ?? []) as SqlRows['rows'], affected: result.affected ?? 0 };
  }

  private get dataSource(): DataSource {
    return (this.runner as { dataSource?: DataSource }).dataSource ?? this.runner.connection;
  }

  /**
   * MySQL/MariaDB: both statements go to the mysql2 connection under the runner directly, queued
   * before either answer comes back (TypeORM's `query` awaits its subscribers before it sends, so
   * two calls could reach the connection in either order). Logged like TypeORM's own.
   */
  async queryBackToBack(first: SqlStatement, second: SqlStatement): Promise<SqlRows> {
    const connection = (await this.runner.connect()) as Mysql2Connection;
    const send = ({ text, params }: SqlStatement) => {
      const values = params as unknown[];
      this.dataSource.logger.logQuery(text, values, this.runner);
      return new Promise<unknown>((resolve, reject) => {
        connection.query(text, values, (error, result) =>
          error ? reject(queryFailed(text, values, error)) : resolve(result),
        );
      });
    };
    const [, result] = await Promise.allSettled([send(first), send(second)]);
    if (result.status === 'rejected') throw result.reason;
    const rows = result.value as { affectedRows?: number } | SqlRows['rows'];
    return Array.isArray(rows)
      ? { rows, affected: rows.length }
      : { rows: [], affected: rows.affectedRows ?? 0 };
  }

  /** PostgreSQL: a named prepared statement on the pooled `pg` client under the runner. */
  private async prepared(name: string, text: string, values: unknown[]): Promise<SqlRows> {
    const client = (await this.runner.connect()) as PgClient;
    try {
      const result = await client.query({ name, text, values });
      return { rows: result.rows ?? [], affected: result.rowCount ?? 0 };
    } catch (error) {
      // The same error TypeORM would throw, so callers see one kind whichever path ran.
      throw queryFailed(text, values, error);
    }
  }
}

/** The error TypeORM would throw for a failed statement (typeorm loaded only when one fails). */
function queryFailed(text: string, params: unknown[], error: unknown): Error {
  const { QueryFailedError } = require('typeorm') as typeof import('typeorm');
  return new QueryFailedError(text, params, error as Error);
}

/**
 * Today's behaviour of the SQL stores, behind the executor interface: query runners of a TypeORM
 * `DataSource`, a caller's `EntityManager` / `QueryRunner` as its transaction, commits reported
 * by a TypeORM subscriber.
 */
export class TypeOrmExecutor implements SqlExecutor {
  readonly sqlExecutor = true;
  readonly client = 'TypeORM';
  readonly txOption = 'manager';

  constructor(readonly dataSource: DataSource) {}

  get dialect(): SqlExecutorDialect {
    return dialectName(this.dataSource.options.type);
  }

  /** MariaDB rather than MySQL (the MySQL dialect's claim and DDL differ). */
  get mariadb(): boolean {
    return this.dataSource.options.type === 'mariadb';
  }

  /** From the driver type the DataSource was configured with (`mariadb` or `mysql`). */
  async serverFlavor(): Promise<MysqlServerFlavor> {
    return this.mariadb ? 'mariadb' : 'mysql';
  }

  async query(statement: SqlStatement): Promise<SqlRows> {
    return this.connection((c) => c.query(statement));
  }

  async connection<T>(fn: (connection: TypeOrmConnection) => Promise<T>): Promise<T> {
    const runner = this.dataSource.createQueryRunner('master');
    try {
      return await fn(new TypeOrmConnection(runner));
    } finally {
      await runner.release();
    }
  }

  async transaction<T>(
    fn: (connection: TypeOrmConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    const runner = this.dataSource.createQueryRunner('master');
    try {
      await runner.startTransaction(options.isolation);
      try {
        const result = await fn(new TypeOrmConnection(runner));
        await runner.commitTransaction();
        return result;
      } catch (error) {
        if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
        throw error;
      }
    } finally {
      await runner.release();
    }
  }

  /** A transaction on its own query runner; `fn` gets the runner's EntityManager (`@Inbox()`). */
  async clientTransaction<T>(
    fn: (manager: unknown, connection: TypeOrmConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    return this.transaction((connection) => fn(connection.runner.manager, connection), options);
  }

  /** The DataSource itself, or an EntityManager of it (`@nestjs-cls/transactional`'s `tx`). */
  ownsClient(value: unknown): boolean {
    return (
      value === this.dataSource ||
      (typeof value === 'object' &&
        value !== null &&
        (value as { connection?: unknown }).connection === this.dataSource)
    );
  }

  /** The open transaction a caller's EntityManager or QueryRunner belongs to, or a clear refusal. */
  async transactionOf(manager: unknown): Promise<CallerTransaction> {
    const runner = this.runnerOf(manager);
    return { connection: new TypeOrmConnection(runner), key: runner };
  }

  runnerOf(manager: unknown): QueryRunner {
    const m = manager as Partial<QueryRunner> & { queryRunner?: QueryRunner };
    const runner: QueryRunner | undefined =
      typeof m?.startTransaction === 'function' && typeof m.query === 'function'
        ? (m as QueryRunner)
        : m?.queryRunner;
    const isManager =
      typeof m === 'object' &&
      m !== null &&
      typeof (m as { transaction?: unknown }).transaction === 'function' &&
      typeof m.query === 'function';
    const isDataSource =
      typeof m === 'object' &&
      m !== null &&
      typeof (m as { createQueryRunner?: unknown }).createQueryRunner === 'function' &&
      'isInitialized' in m;
    if (isDataSource) {
      throw new OutboxValidationError(
        'options.manager',
        'is a DataSource, not the EntityManager of an open transaction: pass the manager that ' +
          'dataSource.transaction(async (manager) => { ... }) gives its callback, or omit manager ' +
          'to let the outbox commit the event in its own transaction.',
      );
    }
    if (!runner && !isManager) {
      throw new OutboxValidationError(
        'options.manager',
        `is not a TypeORM EntityManager (or QueryRunner), got ${describeValue(manager)}. ` +
          'Pass the EntityManager that dataSource.transaction(async (manager) => { ... }) gives its callback, ' +
          'or queryRunner.manager (or the QueryRunner) after await queryRunner.startTransaction(); ' +
          'or omit manager to let the outbox commit the event in its own transaction.',
      );
    }
    if (!runner || !runner.isTransactionActive || runner.isReleased) {
      throw new OutboxValidationError(
        'options.manager',
        'is not inside an open transaction, so the event could be committed without your business write. ' +
          'Pass the EntityManager that dataSource.transaction(async (manager) => { ... }) gives its callback, ' +
          'or queryRunner.manager (or the QueryRunner) after await queryRunner.startTransaction(); ' +
          'or omit manager to let the outbox commit the event in its own transaction.',
      );
    }
    const owner =
      (runner as { dataSource?: unknown; connection?: unknown }).dataSource ?? runner.connection;
    if (owner !== this.dataSource) {
      throw new OutboxValidationError(
        'options.manager',
        'belongs to a different DataSource than the outbox store; use a transaction of the DataSource given in store.dataSource',
      );
    }
    return runner;
  }

  /** A subscriber on the DataSource, removed by the returned function. */
  watchCommits(hooks: CommitHooks): () => void {
    const subscriber = {
      afterTransactionCommit: (event: { queryRunner?: QueryRunner }) => {
        const runner = event.queryRunner;
        // A released savepoint also reports a commit; only the outermost one counts.
        if (runner && !runner.isTransactionActive) hooks.committed(runner);
      },
      afterTransactionRollback: (event: { queryRunner?: QueryRunner }) => {
        if (event.queryRunner && !event.queryRunner.isTransactionActive) {
          hooks.rolledBack(event.queryRunner);
        }
      },
    };
    this.dataSource.subscribers.push(subscriber as never);
    return () => {
      const index = this.dataSource.subscribers.indexOf(subscriber as never);
      if (index >= 0) this.dataSource.subscribers.splice(index, 1);
    };
  }

  /** The `pg` module TypeORM loaded, with the DataSource's (primary's) connection options. */
  listenerConnection(): ListenerConnection {
    const driver = this.dataSource.driver as unknown as { postgres?: { Client?: PgClientClass } };
    const Client = driver.postgres?.Client;
    if (!Client) throw new Error('the DataSource has no pg driver loaded');
    const options = this.dataSource.options as unknown as Record<string, unknown> & {
      replication?: { master?: Record<string, unknown> };
    };
    const c = options.replication?.master ?? options;
    return {
      Client,
      config: {
        connectionString: c.url,
        host: c.host,
        port: c.port,
        user: c.username,
        password: c.password,
        database: c.database,
        ssl: c.ssl ?? options.ssl,
        connectionTimeoutMillis: options.connectTimeoutMS,
      },
    };
  }
}

/** The TypeORM DataSource behind an executor, for the few paths only TypeORM has; else null. */
export function typeOrmDataSourceOf(executor: SqlExecutor): DataSource | null {
  return executor instanceof TypeOrmExecutor ? executor.dataSource : null;
}
