import { requireOpenTransaction } from './caller-transaction-checks';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { assertInstalled } from '../optional-peers';
import {
  CallerTransaction,
  describeValue,
  ListenerConnection,
  SqlConnection,
  SqlExecutor,
  SqlIsolationLevel,
  SqlRows,
  SqlStatement,
} from './sql-executor';
import {
  HOW_TO_TX,
  isEndedTransactionError,
  KyselyLike,
  kyselyTransactionOf,
  raw,
  transactionBuilder,
} from './kysely-shared';

export type { KyselyLike } from './kysely-shared';

/** The parts of a `pg` `Pool` the listener needs (its connection options and Client class). */
interface PgPoolLike {
  connect(): Promise<unknown>;
  options?: Record<string, unknown>;
  Client?: new (config: Record<string, unknown>) => unknown;
}

class KyselyConnection implements SqlConnection {
  constructor(readonly db: KyselyLike) {}

  async query(statement: SqlStatement): Promise<SqlRows> {
    // (Kysely's PostgresDriver runs no named prepared statements: `statement.name` is ignored.)
    const result = await this.db.executeQuery(raw(statement));
    const rows = result.rows ?? [];
    return {
      rows,
      affected: result.numAffectedRows === undefined ? rows.length : Number(result.numAffectedRows),
    };
  }
}

/**
 * `'T'` in a transaction, `'E'` in a failed one, `'I'` outside (the transaction ended: a COMMIT
 * sent by hand). One statement on the transaction's connection, as in `pgExecutor`.
 */
async function transactionStatus(trx: KyselyLike): Promise<'I' | 'T' | 'E'> {
  try {
    const { rows } = await trx.executeQuery(
      raw({ text: 'SELECT transaction_timestamp() <> statement_timestamp() AS open', params: [] }),
    );
    return rows[0]?.open === true ? 'T' : 'I';
  } catch (error) {
    if ((error as { code?: unknown }).code === '25P02') return 'E';
    if (isEndedTransactionError(error)) return 'I';
    throw error;
  }
}

/**
 * The SQL store over Kysely with its `PostgresDialect`: statements run as raw compiled queries
 * (without the db's plugins, so no CamelCasePlugin renames the columns the store reads), a
 * caller's transaction is Kysely's `Transaction`. Kysely has no commit hook: see
 * `CommitWatch.inTransaction` for what replaces it (a NOTIFY inside the caller's transaction,
 * heard only when the listener has the `pg` Pool: `kyselyExecutor(db, { pool })`).
 */
class KyselyExecutor implements SqlExecutor {
  readonly sqlExecutor = true;
  readonly client = 'Kysely';
  readonly txOption = 'tx';
  readonly dialect = 'postgres';
  /** The db without its plugins: the store's statements and results keep their column names. */
  private readonly db: KyselyLike;

  constructor(
    /** The app's db, plugins included: what `clientTransaction` hands the app. */
    private readonly appDb: KyselyLike,
    private readonly pool: PgPoolLike | undefined,
  ) {
    this.db = appDb.withoutPlugins();
  }

  query(statement: SqlStatement): Promise<SqlRows> {
    return new KyselyConnection(this.db).query(statement);
  }

  connection<T>(fn: (connection: SqlConnection) => Promise<T>): Promise<T> {
    return this.db.connection().execute((db) => fn(new KyselyConnection(db)));
  }

  transaction<T>(
    fn: (connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    return transactionBuilder(this.db, options.isolation).execute((trx) =>
      fn(new KyselyConnection(trx)),
    );
  }

  /**
   * `db.transaction().setIsolationLevel(…).execute(cb)` on the app's db: `fn` gets the
   * `Transaction` with the app's plugins; the store's statements run on it without them.
   */
  clientTransaction<T>(
    fn: (trx: unknown, connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    return transactionBuilder(this.appDb, options.isolation).execute((trx) =>
      fn(trx, new KyselyConnection(trx.withoutPlugins())),
    );
  }

  ownsClient(value: unknown): boolean {
    return value === this.appDb;
  }

  /** A Kysely `Transaction` of this db inside an open transaction (see `transactionStatus`). */
  async transactionOf(tx: unknown): Promise<CallerTransaction> {
    const trx = kyselyTransactionOf(tx, this.db);
    const status =
      trx.isCommitted === true || trx.isRolledBack === true ? 'I' : await transactionStatus(trx);
    requireOpenTransaction(
      status,
      `is a Kysely Transaction that already committed or rolled back. ${HOW_TO_TX}`,
    );
    const connection = trx.withoutPlugins();
    return { connection: new KyselyConnection(connection), key: trx };
  }

  /**
   * A new `pg` Client with the options of the Pool given as `kyselyExecutor(db, { pool })`;
   * `null` without it (Kysely does not expose its pool): then nothing LISTENs, and events of
   * callers' transactions are found by the dispatcher's poll.
   */
  listenerConnection(): ListenerConnection | null {
    if (!this.pool) return null;
    const { Client: ownClient, ...options } = this.pool.options ?? {};
    const Client =
      (ownClient as ListenerConnection['Client'] | undefined) ??
      this.pool.Client ??
      (require('pg') as { Client: ListenerConnection['Client'] }).Client;
    return { Client, config: options };
  }
}

/** Options of `kyselyExecutor`. */
export interface KyselyExecutorOptions {
  /**
   * PostgreSQL: the `pg` `Pool` given to Kysely's `PostgresDialect`: its connection options open
   * the connection that LISTENs for wake-ups. Without it, wake-ups from other processes (and from
   * appends in your transactions) fall back to the dispatcher's poll.
   *
   * MySQL/MariaDB (required): the mysql2 pool given to Kysely's `MysqlDialect`; the store's own
   * statements run on it, a caller's on the connection under its `Transaction`.
   */
  pool?: unknown;
}

/**
 * The executor of the 'sql' store for Kysely on PostgreSQL (`PostgresDialect`) or MySQL/MariaDB
 * (`MysqlDialect`): `store: { type: 'sql', executor: kyselyExecutor(db, { pool }) }`, and `append(events, { tx: trx })` inside
 * `db.transaction().execute(async (trx) => …)`. `kysely` is an optional peer: a missing one is
 * named with its install command.
 */
export function kyselyExecutor(db: unknown, options: KyselyExecutorOptions = {}): SqlExecutor {
  assertInstalled('The Kysely executor (kyselyExecutor)', ['kysely']);
  const d = db as Partial<KyselyLike> | null;
  if (
    typeof d !== 'object' ||
    d === null ||
    typeof d.executeQuery !== 'function' ||
    typeof d.transaction !== 'function' ||
    typeof d.getExecutor !== 'function' ||
    typeof d.withoutPlugins !== 'function'
  ) {
    throw new OutboxOptionsError(
      'store.executor',
      `kyselyExecutor(db) needs a Kysely instance (new Kysely({ dialect: new PostgresDialect({ pool }) })), got ${describeValue(db)}`,
    );
  }
  if (d.isTransaction !== false) {
    throw new OutboxOptionsError(
      'store.executor',
      'kyselyExecutor(db) needs the root Kysely instance, not a Transaction: pass the transaction to append(events, { tx: trx })',
    );
  }
  // MySQL/MariaDB (MysqlDialect over a mysql2 pool): lib/executors/kysely-mysql.ts, loaded only then.
  const { kyselyMysqlExecutor } = require('./kysely-mysql') as typeof import('./kysely-mysql');
  const mysql = kyselyMysqlExecutor(d as KyselyLike, options.pool);
  if (mysql) return mysql;
  const { PostgresAdapter } = require('kysely') as typeof import('kysely');
  if (!(d.getExecutor().adapter instanceof PostgresAdapter)) {
    throw new OutboxOptionsError(
      'store.executor',
      `kyselyExecutor(db) supports Kysely on PostgreSQL (PostgresDialect) and MySQL/MariaDB (MysqlDialect), got a db with ${describeValue(d.getExecutor().adapter)}`,
    );
  }
  const pool = options.pool as Partial<PgPoolLike> | undefined;
  if (
    pool !== undefined &&
    (typeof pool !== 'object' || pool === null || typeof pool.connect !== 'function')
  ) {
    throw new OutboxOptionsError(
      'store.executor',
      `kyselyExecutor(db, { pool }) needs the pg Pool given to PostgresDialect, got ${describeValue(pool)}`,
    );
  }
  return new KyselyExecutor(d as KyselyLike, pool as PgPoolLike | undefined);
}
