import { PooledStatements } from './pooled-statements';
import { refuseTypeOrmTx } from './caller-transaction-checks';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxValidationError } from '../errors/outbox-validation.error';
import { assertInstalled } from '../optional-peers';
import { connectionOf, Mysql2Connection, Mysql2Executor, poolOf } from './mysql2-executor';
import {
  CallerTransaction,
  describeValue,
  MysqlServerFlavor,
  SqlConnection,
  SqlExecutor,
  SqlIsolationLevel,
} from './sql-executor';

const HOW_TO_TX =
  "Pass Drizzle's transaction: await db.transaction(async (tx) => { …; await outbox.append(events, { tx }); }). " +
  'Or omit tx to let the outbox commit the event in its own transaction.';
const DRIZZLE_MYSQL_TX = {
  client: 'Drizzle',
  executorCall: 'drizzleExecutor(db)',
  howTo: HOW_TO_TX,
};

/** What the executor loads from drizzle-orm's MySQL core, lazily (an optional peer). */
interface DrizzleMysql {
  is(value: unknown, type: unknown): boolean;
  MySqlDatabase: unknown;
  MySqlTransaction: unknown;
}

function drizzleMysql(): DrizzleMysql {
  const { is } = require('drizzle-orm') as { is: DrizzleMysql['is'] };
  const { MySqlDatabase, MySqlTransaction } = require('drizzle-orm/mysql-core') as {
    MySqlDatabase: unknown;
    MySqlTransaction: unknown;
  };
  return { is, MySqlDatabase, MySqlTransaction };
}

/**
 * The mysql2 `PoolConnection` a Drizzle MySQL transaction runs on: its session's `client`
 * (drizzle-orm 0.45, `MySql2Session.client`, set by `db.transaction()` to
 * `await pool.getConnection()`). Not public API, so it is checked, not assumed.
 */
function connectionUnder(tx: object) {
  return connectionOf((tx as { session?: { client?: unknown } }).session?.client);
}

/**
 * The SQL store over Drizzle's mysql2 driver (MySQL/MariaDB): the store's own statements run on
 * the mysql2 pool under the database (`db.$client`), exactly as with `mysql2Executor(pool)`; a
 * caller's transaction is Drizzle's `tx`, whose statements run on its `PoolConnection`.
 */
class DrizzleMysqlExecutor extends PooledStatements<Mysql2Executor> implements SqlExecutor {
  readonly sqlExecutor = true;
  readonly client = 'Drizzle';
  readonly txOption = 'tx';
  readonly dialect = 'mysql';

  constructor(
    private readonly db: object,
    mysql2: Mysql2Executor,
  ) {
    super(mysql2);
  }

  serverFlavor(): Promise<MysqlServerFlavor> {
    return this.pooled.serverFlavor();
  }

  /** Drizzle's own `db.transaction()`, `tx` its `MySqlTransaction`. */
  clientTransaction<T>(
    fn: (tx: unknown, connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    const db = this.db as {
      transaction(fn: (tx: object) => Promise<T>, config?: object): Promise<T>;
    };
    const config = options.isolation
      ? { isolationLevel: options.isolation.toLowerCase() }
      : undefined;
    return db.transaction(async (tx) => {
      const connection = connectionUnder(tx);
      if (!connection) throw new Error('nestjs-outbox: a Drizzle transaction without a connection');
      return fn(tx, new Mysql2Connection(connection));
    }, config);
  }

  ownsClient(value: unknown): boolean {
    return value === this.db;
  }

  /** Drizzle's `tx` (a `MySqlTransaction`) of this database, inside its open transaction. */
  async transactionOf(tx: unknown): Promise<CallerTransaction> {
    refuseTypeOrmTx(tx, DRIZZLE_MYSQL_TX);
    const { is, MySqlDatabase, MySqlTransaction } = drizzleMysql();
    const t = tx as object | null;
    if (typeof t !== 'object' || t === null || !is(t, MySqlTransaction)) {
      if (t === this.db || (typeof t === 'object' && t !== null && is(t, MySqlDatabase))) {
        throw new OutboxValidationError(
          'options.tx',
          `is the Drizzle database (db), not a transaction: a write through it commits on its own. ${HOW_TO_TX}`,
        );
      }
      throw new OutboxValidationError(
        'options.tx',
        connectionOf(t) || poolOf(t)
          ? `is a mysql2 ${poolOf(t) ? 'Pool' : 'PoolConnection'}, but this store (drizzleExecutor) takes Drizzle's transaction object. ${HOW_TO_TX}`
          : `is not a Drizzle MySQL transaction, got ${describeValue(tx)}. ${HOW_TO_TX}`,
      );
    }
    const connection = connectionUnder(t);
    if (!connection) {
      throw new OutboxValidationError(
        'options.tx',
        "is a Drizzle transaction, but not on a mysql2 PoolConnection (another driver than 'drizzle-orm/mysql2'). " +
          'drizzleExecutor(db) takes a transaction of the database it was given.',
      );
    }
    return this.pooled.callerTransaction(connection, DRIZZLE_MYSQL_TX);
  }
}

/**
 * `drizzleExecutor(db)` for a Drizzle MySQL database (drizzle-orm/mysql2 over a mysql2 pool);
 * `null` when `db` is not a Drizzle MySQL database (the caller tries PostgreSQL).
 */
export function drizzleMysqlExecutor(db: unknown): SqlExecutor | null {
  if (typeof db !== 'object' || db === null) return null;
  assertInstalled('The Drizzle executor (drizzleExecutor)', ['drizzle-orm']);
  const { is, MySqlDatabase, MySqlTransaction } = drizzleMysql();
  if (!is(db, MySqlDatabase)) return null;
  assertInstalled('The Drizzle executor on MySQL/MariaDB (drizzleExecutor)', ['mysql2']);
  const HOW =
    "drizzleExecutor(db) needs a Drizzle MySQL database over a mysql2 Pool (drizzle({ client: createPool(…) }) from 'drizzle-orm/mysql2')";
  if (is(db, MySqlTransaction)) {
    throw new OutboxOptionsError(
      'store.executor',
      `${HOW}, got a Drizzle transaction (tx): pass the database, and tx to append() as { tx }`,
    );
  }
  const client = (db as { $client?: unknown }).$client;
  const pool = poolOf(client);
  if (!pool) {
    throw new OutboxOptionsError(
      'store.executor',
      `${HOW}, got one over ${describeValue(client)}: a single connection cannot run the outbox's transactions beside yours`,
    );
  }
  return new DrizzleMysqlExecutor(db, new Mysql2Executor(client as object, pool));
}
