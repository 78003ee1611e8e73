import { PooledStatements } from './pooled-statements';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxValidationError } from '../errors/outbox-validation.error';
import { assertInstalled } from '../optional-peers';
import {
  HOW_TO_TX,
  isEndedTransactionError,
  KyselyLike,
  kyselyTransactionOf,
  transactionBuilder,
} from './kysely-shared';
import { CoreConnection, Mysql2Connection, Mysql2Executor, poolOf } from './mysql2-executor';
import {
  CallerTransaction,
  describeValue,
  MysqlServerFlavor,
  SqlConnection,
  SqlExecutor,
  SqlIsolationLevel,
} from './sql-executor';

const KYSELY_MYSQL_TX = {
  client: 'Kysely',
  executorCall: 'kyselyExecutor(db, { pool })',
  howTo: HOW_TO_TX,
};
const SAME_POOL =
  'kyselyExecutor(db, { pool }) on MySQL/MariaDB needs the mysql2 pool given to Kysely: ' +
  "const pool = createPool({ … }) (from 'mysql2'); new Kysely({ dialect: new MysqlDialect({ pool }) }); kyselyExecutor(db, { pool })";

/** The pool's connections, in mysql2's own list (not public API: a ring queue with get(i)). */
interface ConnectionList {
  length: number;
  get(index: number): (CoreConnection & { threadId?: number }) | undefined;
}

/**
 * The SQL store over Kysely with its `MysqlDialect` (MySQL/MariaDB over a mysql2 pool): the
 * store's own statements run on that pool, exactly as with `mysql2Executor(pool)`; a caller's
 * transaction is Kysely's `Transaction`, whose statements run on the mysql2 `PoolConnection`
 * under it. Kysely keeps that connection private, so it is found by its server thread id
 * (`CONNECTION_ID()` asked through the transaction) among the pool's connections. Running on the
 * connection itself, rather than through `trx.executeQuery`, gives what `mysql2Executor` has:
 * mysql2's errors as they are, statements sent back to back, and one check that the transaction
 * is open on MySQL and MariaDB alike (the status flags of the server's OK packet, where only
 * MariaDB has `@@in_transaction`).
 */
class KyselyMysqlExecutor extends PooledStatements<Mysql2Executor> implements SqlExecutor {
  readonly sqlExecutor = true;
  readonly client = 'Kysely';
  readonly txOption = 'tx';
  readonly dialect = 'mysql';

  constructor(
    /** The app's db, plugins included: what `clientTransaction` hands the app. */
    private readonly appDb: KyselyLike,
    private readonly connections: { _allConnections?: unknown },
    mysql2: Mysql2Executor,
  ) {
    super(mysql2);
  }

  serverFlavor(): Promise<MysqlServerFlavor> {
    return this.pooled.serverFlavor();
  }

  /**
   * `db.transaction().setIsolationLevel(…).execute(cb)` on the app's db: `fn` gets the
   * `Transaction`, the store's statements run on the connection under it.
   */
  clientTransaction<T>(
    fn: (trx: unknown, connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    return transactionBuilder(this.appDb, options.isolation).execute(async (trx) =>
      fn(trx, new Mysql2Connection(await this.connectionUnder(trx))),
    );
  }

  ownsClient(value: unknown): boolean {
    return value === this.appDb;
  }

  /** A Kysely `Transaction` of this db, open on the server (see `Mysql2Executor.callerTransaction`). */
  async transactionOf(tx: unknown): Promise<CallerTransaction> {
    const trx = kyselyTransactionOf(tx, this.appDb);
    if (trx.isCommitted === true || trx.isRolledBack === true) {
      throw new OutboxValidationError(
        'options.tx',
        `is a Kysely Transaction that already committed or rolled back. ${HOW_TO_TX}`,
      );
    }
    return this.pooled.callerTransaction(await this.connectionUnder(trx), KYSELY_MYSQL_TX);
  }

  /** The mysql2 connection `trx` runs on. */
  private async connectionUnder(trx: KyselyLike): Promise<CoreConnection> {
    const { CompiledQuery } = require('kysely') as typeof import('kysely');
    const { rows } = await trx
      .withoutPlugins()
      .executeQuery(CompiledQuery.raw('SELECT CONNECTION_ID() AS id', []))
      .catch((error: unknown) => {
        // Kysely refuses statements in a Transaction whose execute() callback has returned.
        if (!isEndedTransactionError(error)) throw error;
        throw new OutboxValidationError(
          'options.tx',
          `is a Kysely Transaction that already committed or rolled back. ${HOW_TO_TX}`,
        );
      });
    const id = Number(rows[0]?.id);
    const all = this.connections._allConnections as ConnectionList | undefined;
    for (let i = 0; i < (all?.length ?? 0); i++) {
      const connection = all!.get(i);
      if (connection?.threadId === id) return connection;
    }
    throw new OutboxOptionsError(
      'store.executor',
      `the Kysely transaction runs on connection ${id}, which is not in the pool given to kyselyExecutor. ${SAME_POOL}`,
    );
  }
}

/**
 * `kyselyExecutor(db, { pool })` for a Kysely instance whose dialect is `MysqlDialect`; `null`
 * for any other (the caller goes on with PostgreSQL).
 */
export function kyselyMysqlExecutor(db: KyselyLike, pool: unknown): SqlExecutor | null {
  const { MysqlAdapter } = require('kysely') as typeof import('kysely');
  if (!(db.getExecutor().adapter instanceof MysqlAdapter)) return null;
  assertInstalled('The Kysely executor on MySQL/MariaDB (kyselyExecutor)', ['mysql2']);
  const core = poolOf(pool);
  if (!core) {
    throw new OutboxOptionsError(
      'store.executor',
      `${SAME_POOL}, got ${pool === undefined ? 'no pool' : describeValue(pool)}`,
    );
  }
  return new KyselyMysqlExecutor(db, core, new Mysql2Executor(pool as object, core));
}
