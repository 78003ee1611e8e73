import { refuseTypeOrmTx, TxRefusalContext } from './caller-transaction-checks';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxValidationError } from '../errors/outbox-validation.error';
import { assertInstalled } from '../optional-peers';
import {
  CallerTransaction,
  describeValue,
  serverFlavorOnce,
  SqlConnection,
  SqlExecutor,
  SqlIsolationLevel,
  SqlRows,
  SqlStatement,
} from './sql-executor';

/**
 * The executor works on mysql2's callback objects (`Pool`, `PoolConnection`), which the promise
 * API wraps (`promisePool.pool`, `promiseConnection.connection`): one code path for both APIs,
 * and every statement queued on the connection the moment it is called.
 */
export interface CoreConnection {
  query(
    text: string,
    params: unknown[],
    callback: (error: Error | null, result: unknown) => void,
  ): unknown;
  release(): void;
  destroy(): void;
  /** mysql2's own state (not public API; read only to refuse a connection the caller let go). */
  _pool?: unknown;
  _released?: boolean;
  _closing?: boolean;
  _fatalError?: unknown;
}

interface CorePool {
  getConnection(callback: (error: Error | null, connection: CoreConnection) => void): void;
  /** `PoolCluster` has `getConnection` too, but no `_allConnections` (not public API). */
  _allConnections?: unknown;
}

/** A promise-API object (`mysql2/promise`) wraps its callback object here. */
interface PromiseWrapper {
  pool?: CorePool;
  connection?: CoreConnection;
}

/** `SERVER_STATUS_IN_TRANS` and `SERVER_STATUS_AUTOCOMMIT` of the protocol's OK packet. */
const IN_TRANS = 0x0001;
const AUTOCOMMIT = 0x0002;

const HOW_TO_TX =
  'Pass the PoolConnection of your transaction: const conn = await pool.getConnection(); ' +
  'await conn.beginTransaction(); … append(events, { tx: conn }) …; await conn.commit(); conn.release(). ' +
  'Or omit tx to let the outbox commit the event in its own transaction.';
const MYSQL2_TX = { client: 'mysql2', executorCall: 'mysql2Executor(pool)', howTo: HOW_TO_TX };

function isCorePool(value: unknown): value is CorePool {
  const p = value as Partial<CorePool> | null;
  return (
    typeof p === 'object' &&
    p !== null &&
    typeof p.getConnection === 'function' &&
    '_allConnections' in p
  );
}

export function poolOf(value: unknown): CorePool | undefined {
  if (isCorePool(value)) return value;
  const wrapped = (value as PromiseWrapper | null)?.pool;
  return isCorePool(wrapped) ? wrapped : undefined;
}

function isCoreConnection(value: unknown): value is CoreConnection {
  const c = value as Partial<CoreConnection> | null;
  return (
    typeof c === 'object' &&
    c !== null &&
    typeof c.query === 'function' &&
    typeof c.release === 'function' &&
    '_pool' in c
  );
}

export function connectionOf(value: unknown): CoreConnection | undefined {
  if (isCoreConnection(value)) return value;
  const wrapped = (value as PromiseWrapper | null)?.connection;
  return isCoreConnection(wrapped) ? wrapped : undefined;
}

function send(connection: Pick<CoreConnection, 'query'>, text: string, params: readonly unknown[]) {
  return new Promise<unknown>((resolve, reject) => {
    connection.query(text, params as unknown[], (error, result) =>
      error ? reject(error) : resolve(result),
    );
  });
}

function toRows(result: unknown): SqlRows {
  if (Array.isArray(result)) return { rows: result, affected: result.length };
  return { rows: [], affected: (result as { affectedRows?: number }).affectedRows ?? 0 };
}

/** Statements on one mysql2 pooled connection; mysql2's errors (`errno`, `code`) as they are. */
export class Mysql2Connection implements SqlConnection {
  constructor(readonly connection: Pick<CoreConnection, 'query'>) {}

  async query(statement: SqlStatement): Promise<SqlRows> {
    return toRows(await send(this.connection, statement.text, statement.params));
  }

  /** Both are queued on the connection synchronously, so mysql2 writes them back to back. */
  async queryBackToBack(first: SqlStatement, second: SqlStatement): Promise<SqlRows> {
    const [, result] = await Promise.allSettled([
      send(this.connection, first.text, first.params),
      send(this.connection, second.text, second.params),
    ]);
    if (result.status === 'rejected') throw result.reason;
    return toRows(result.value);
  }
}

/**
 * The SQL store over a mysql2 pool (`mysql2/promise`'s `createPool`, or the callback one):
 * statements run on its connections, a caller's transaction is the `PoolConnection` on which it
 * called `beginTransaction()`. mysql2 has no commit hook: see `CommitWatch.inTransaction` for
 * what replaces it.
 */
export class Mysql2Executor implements SqlExecutor {
  readonly sqlExecutor = true;
  readonly client = 'mysql2';
  readonly txOption = 'tx';
  readonly dialect = 'mysql';

  /**
   * @param given the pool the app passed (promise or callback API)
   * @param pool its callback pool
   */
  constructor(
    private readonly given: object,
    private readonly pool: CorePool,
  ) {}

  private acquire(): Promise<CoreConnection> {
    return new Promise((resolve, reject) =>
      this.pool.getConnection((error, connection) => (error ? reject(error) : resolve(connection))),
    );
  }

  /** From `VERSION()`, once (see `serverFlavorOnce`). */
  readonly serverFlavor = serverFlavorOnce((statement) => this.query(statement));

  query(statement: SqlStatement): Promise<SqlRows> {
    return this.connection((c) => c.query(statement));
  }

  async connection<T>(fn: (connection: SqlConnection) => Promise<T>): Promise<T> {
    const connection = await this.acquire();
    try {
      return await fn(new Mysql2Connection(connection));
    } finally {
      connection.release();
    }
  }

  transaction<T>(
    fn: (connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    return this.clientTransaction((_tx, connection) => fn(connection), options);
  }

  /** `tx` is the PoolConnection in the API the pool was given in (promise or callback). */
  async clientTransaction<T>(
    fn: (tx: unknown, connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    const connection = await this.acquire();
    let broken = false;
    try {
      try {
        // Without a scope, SET TRANSACTION sets the next transaction's isolation only: a
        // connection that could not start that transaction is not given back with it pending.
        if (options.isolation) {
          await send(connection, `SET TRANSACTION ISOLATION LEVEL ${options.isolation}`, []);
        }
        await send(connection, 'START TRANSACTION', []);
      } catch (error) {
        broken = true;
        throw error;
      }
      try {
        const tx = this.given === this.pool ? connection : promiseOf(connection);
        const result = await fn(tx, new Mysql2Connection(connection));
        await send(connection, 'COMMIT', []);
        return result;
      } catch (error) {
        // A connection that cannot roll back is not given back to the pool.
        await send(connection, 'ROLLBACK', []).catch(() => (broken = true));
        throw error;
      }
    } finally {
      if (broken) connection.destroy();
      else connection.release();
    }
  }

  ownsClient(value: unknown): boolean {
    return value === this.given || value === this.pool;
  }

  /**
   * A `PoolConnection` of this pool inside an open transaction. The server says so itself: the
   * status flags of the OK packet of a no-op statement (`DO 0`) carry `SERVER_STATUS_IN_TRANS`
   * on MySQL and MariaDB alike, from `START TRANSACTION` on (MySQL's `information_schema.innodb_trx`
   * lists a transaction only once it has touched a table; MariaDB's `@@in_transaction` has no
   * MySQL twin). With autocommit off every statement is inside a transaction.
   */
  async transactionOf(tx: unknown): Promise<CallerTransaction> {
    refuseTypeOrmTx(tx, MYSQL2_TX);
    if (poolOf(tx)) {
      throw new OutboxValidationError(
        'options.tx',
        `is a mysql2 Pool, which has no transaction of its own. ${HOW_TO_TX}`,
      );
    }
    const connection = connectionOf(tx);
    if (!connection) {
      throw new OutboxValidationError(
        'options.tx',
        `is not a mysql2 PoolConnection, got ${describeValue(tx)}. ${HOW_TO_TX}`,
      );
    }
    return this.callerTransaction(connection, MYSQL2_TX);
  }

  /**
   * The transaction open on `connection`, a pooled connection the caller holds (directly, or
   * under a Drizzle transaction), or a refusal in the words of `context`.
   */
  async callerTransaction(
    connection: CoreConnection,
    context: TxRefusalContext,
  ): Promise<CallerTransaction> {
    const HOW_TO_TX = context.howTo;
    if (connection._released || connection._pool === null) {
      throw new OutboxValidationError(
        'options.tx',
        `is a PoolConnection that was released to its pool (or destroyed): its transaction is over. ${HOW_TO_TX}`,
      );
    }
    if (connection._pool !== this.pool) {
      throw new OutboxValidationError(
        'options.tx',
        `is not a connection of the pool given to ${context.executorCall}: its transaction may be on another database. ${HOW_TO_TX}`,
      );
    }
    if (connection._closing || connection._fatalError) {
      throw new OutboxValidationError(
        'options.tx',
        `is a closed connection: its transaction is over. ${HOW_TO_TX}`,
      );
    }
    const status = ((await send(connection, 'DO 0', [])) as { serverStatus?: number }).serverStatus;
    requireMysqlOpenTransaction(status, HOW_TO_TX);
    return { connection: new Mysql2Connection(connection), key: connection };
  }
}

/**
 * Refuses a connection whose server status flags (of the OK packet of a no-op statement, `DO 0`)
 * say it is outside a transaction: neither `SERVER_STATUS_IN_TRANS` (set from `START TRANSACTION`
 * on, on MySQL and MariaDB alike) nor autocommit off (then every statement is in a transaction).
 */
export function requireMysqlOpenTransaction(status: number | undefined, howTo: string): void {
  if (status !== undefined && ((status & IN_TRANS) !== 0 || (status & AUTOCOMMIT) === 0)) return;
  throw new OutboxValidationError(
    'options.tx',
    `is not inside an open transaction, so the event could be committed without your business write. ${howTo}`,
  );
}

/** mysql2's promise wrapper of a callback PoolConnection. */
function promiseOf(connection: CoreConnection): unknown {
  return (connection as unknown as { promise(): unknown }).promise();
}

/**
 * The executor of the 'sql' store for mysql2 (MySQL or MariaDB): `store: { type: 'sql',
 * executor: mysql2Executor(pool) }` with a pool of `mysql2/promise` (or of callback `mysql2`).
 * `mysql2` is an optional peer: a missing one is named with its install command.
 */
export function mysql2Executor(pool: unknown): SqlExecutor {
  assertInstalled('The mysql2 executor (mysql2Executor)', ['mysql2']);
  const core = poolOf(pool);
  if (!core) {
    throw new OutboxOptionsError(
      'store.executor',
      `mysql2Executor(pool) needs a mysql2 Pool (createPool({ uri }) from 'mysql2/promise'), got ${describeValue(pool)}` +
        (connectionOf(pool) || typeof (pool as { query?: unknown })?.query === 'function'
          ? ': a single Connection hands out no pooled connections; use createPool instead of createConnection'
          : ''),
    );
  }
  return new Mysql2Executor(pool as object, core);
}
