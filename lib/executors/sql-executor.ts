/**
 * The one place where the SQL stores meet a database client. The dialects (PostgreSQL,
 * MySQL/MariaDB, SQLite) write every statement once, as fixed text with positional parameters
 * (`$1` on PostgreSQL, `?` elsewhere); an executor only carries them: on a pooled connection, in
 * a transaction of its own, or in the caller's transaction. One executor per client library
 * (TypeORM, node-postgres, …); each loads its client lazily, so an app pays only for the one it
 * uses.
 */

export type SqlExecutorDialect = 'postgres' | 'mysql' | 'sqlite';

/** Transaction isolation levels an executor opens a transaction with. */
export type SqlIsolationLevel =
  'READ UNCOMMITTED' | 'READ COMMITTED' | 'REPEATABLE READ' | 'SERIALIZABLE';

/** One statement: its text in the dialect's placeholder style, and its parameters. */
export interface SqlStatement {
  text: string;
  params: readonly unknown[];
  /**
   * PostgreSQL: keep this statement prepared under this name on each connection (parsed and
   * planned once per connection). Executors that cannot ignore it.
   */
  name?: string;
}

export interface SqlRows {
  rows: Array<Record<string, any>>;
  /** Rows written by an INSERT/UPDATE/DELETE; rows returned by a SELECT. */
  affected: number;
}

/** A connection the executor handed out: pooled, in its own transaction, or the caller's. */
export interface SqlConnection {
  query(statement: SqlStatement): Promise<SqlRows>;
  /**
   * MySQL/MariaDB: sends `second` right behind `first` on this connection, both queued before
   * either answer comes back, so the server runs the second the moment the first is done (the
   * MariaDB claim sets the isolation of its own statement this way, see the MySQL dialect).
   * Resolves with the second's rows even when the first failed (the second may have leased
   * rows); rejects with the second's error. Absent: the dialect sends them one after the other.
   */
  queryBackToBack?(first: SqlStatement, second: SqlStatement): Promise<SqlRows>;
}

/** Which MySQL-family server a `'mysql'` dialect executor talks to. */
export type MysqlServerFlavor = 'mysql' | 'mariadb';

/** A caller's transaction the executor recognised. */
export interface CallerTransaction {
  /** Runs statements inside that transaction. */
  connection: SqlConnection;
  /** Identifies the transaction in commit reports (`watchCommits`). */
  key: object;
}

/** What `watchCommits` reports, by the `key` of a caller's transaction. */
export interface CommitHooks {
  /** The outermost transaction committed (a released savepoint is not a commit). */
  committed(key: object): void;
  rolledBack(key: object): void;
}

/** How to open the PostgreSQL connection that LISTENs for wake-ups (never a pooled one). */
export interface ListenerConnection {
  /** The `pg` `Client` class. */
  Client: new (config: Record<string, unknown>) => unknown;
  /** Its connection options (host, user, …), as `pg` takes them. */
  config: Record<string, unknown>;
}

/**
 * Errors: a statement that fails rejects with an error carrying the driver's code, on the error
 * itself or on its `driverError` (the dialects read `error.driverError ?? error`): PostgreSQL's
 * SQLSTATE as `code` ('40P01', '23505', '55P03', …), MySQL/MariaDB's `errno` (1062, 1213, …) and
 * `code` ('ER_DUP_ENTRY'), SQLite's `code` ('SQLITE_BUSY', …). An executor over a client that
 * wraps driver errors (Prisma, MikroORM) unwraps them or sets `driverError`.
 */
export interface SqlExecutor {
  /** Marks executors, so options can tell one from a client passed by mistake. */
  readonly sqlExecutor: true;
  /** The client library, in messages: `TypeORM`, `node-postgres`. */
  readonly client: string;
  /** The append option that carries this client's transaction (`options.manager` for TypeORM). */
  readonly txOption: 'manager' | 'tx';
  /** The SQL dialect of the database behind the client. */
  readonly dialect: SqlExecutorDialect;
  /**
   * `'mysql'` dialect: MariaDB or MySQL (MariaDB has `INSERT/DELETE … RETURNING`, which its
   * claim, append and ack use). Asked once, before the dialect's first statement; it may ask the
   * server. Absent: MySQL, whose statements MariaDB runs too.
   */
  serverFlavor?(): Promise<MysqlServerFlavor>;
  /** Runs one statement on a pooled connection; it commits on its own. */
  query(statement: SqlStatement): Promise<SqlRows>;
  /** Runs `fn` on one pooled connection, outside any transaction (each statement commits). */
  connection<T>(fn: (connection: SqlConnection) => Promise<T>): Promise<T>;
  /**
   * Runs `fn` in a transaction on one pooled connection: commits when it resolves, rolls back
   * when it throws (and rethrows).
   */
  transaction<T>(
    fn: (connection: SqlConnection) => Promise<T>,
    options?: { isolation?: SqlIsolationLevel },
  ): Promise<T>;
  /**
   * Opens a transaction through the client's own API and runs `fn` with that client's
   * transaction object — what the app writes through and what `transactionOf` accepts (TypeORM:
   * the EntityManager; node-postgres: the PoolClient after BEGIN; Drizzle: `tx`; Kysely: the
   * `Transaction`; Prisma: the interactive-transaction client; MikroORM: the forked
   * EntityManager) — and a connection that runs statements inside that same transaction. Commits
   * when `fn` resolves, rolls back and rethrows when it throws. `@Inbox()` runs its claim and the
   * consumer's method in it, so both commit together.
   */
  clientTransaction<T>(
    fn: (tx: unknown, connection: SqlConnection) => Promise<T>,
    options?: { isolation?: SqlIsolationLevel },
  ): Promise<T>;
  /**
   * Whether `value` is the client this executor was made from (the Pool, the Drizzle db, the
   * Kysely instance, the PrismaClient, the MikroORM EntityManager/ORM, the TypeORM DataSource or
   * its manager). `@Inbox()` makes its transaction the `@nestjs-cls/transactional` host's only
   * when the host's client outside a transaction (`TransactionHost.tx`) is this executor's.
   */
  ownsClient(value: unknown): boolean;
  /**
   * The caller's open transaction `tx` belongs to (this client's own transaction object), or an
   * `OutboxValidationError` naming `options.<txOption>` that says what to pass instead: `tx` is
   * another client's object, another database's, or not inside an open transaction.
   */
  transactionOf(tx: unknown): Promise<CallerTransaction>;
  /**
   * Reports commits and rollbacks of callers' transactions, where the client can (TypeORM's
   * subscribers); returns the function that stops it. Absent: the store cannot hear a caller's
   * commit (see the store for what replaces it).
   */
  watchCommits?(hooks: CommitHooks): () => void;
  /** PostgreSQL: how to open the wake-up listener's own connection; `null` when unknown. */
  listenerConnection?(): ListenerConnection | null;
  /**
   * Ends what the executor opened itself (never the caller's client), when the app closes: the
   * store calls it on shutdown. Absent: the executor opens nothing of its own.
   */
  close?(): Promise<void>;
}

export function isSqlExecutor(value: unknown): value is SqlExecutor {
  return (
    typeof value === 'object' &&
    value !== null &&
    (value as { sqlExecutor?: unknown }).sqlExecutor === true &&
    typeof (value as { query?: unknown }).query === 'function'
  );
}

/** `an instance of X`, `a plain object`, or the JSON of a primitive, for error messages. */
export function describeValue(value: unknown): string {
  if (typeof value !== 'object' || value === null) return JSON.stringify(value) ?? typeof value;
  const name = (value as object).constructor?.name;
  return name && name !== 'Object' ? `an instance of ${name}` : 'a plain object';
}

/**
 * `serverFlavor()` of a MySQL-family executor: `VERSION()` asked once through `query` (`10.11.6-
 * MariaDB` names MariaDB; MySQL's does not), kept for the executor's life; a failed ask is asked
 * again next time.
 */
export function serverFlavorOnce(
  query: (statement: SqlStatement) => Promise<SqlRows>,
): () => Promise<MysqlServerFlavor> {
  let flavor: Promise<MysqlServerFlavor> | undefined;
  return () =>
    (flavor ??= query({ text: 'SELECT VERSION() AS version', params: [] }).then(
      ({ rows }) => (/mariadb/i.test(String(rows[0]?.version)) ? 'mariadb' : 'mysql'),
      (error: unknown) => {
        flavor = undefined;
        throw error;
      },
    ));
}
