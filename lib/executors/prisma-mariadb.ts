import {
  asBuffer,
  callerTransaction,
  isDecimal,
  ISOLATION,
  ownsPrismaClient,
  PrismaLike,
  PrismaTxConnection,
  withDriverError,
} from './prisma-shared';
import {
  CallerTransaction,
  serverFlavorOnce,
  SqlConnection,
  SqlExecutor,
  SqlIsolationLevel,
  SqlRows,
  SqlStatement,
} from './sql-executor';

/** The parts of a `mariadb` pooled connection (its promise API) the executor uses. */
interface MariaDbConnectionLike {
  query(options: { sql: string }, values: readonly unknown[]): Promise<unknown>;
  release(): Promise<void>;
  destroy(): void;
}

/** The parts of the adapter `PrismaMariaDb.connect()` opens: its `mariadb` pool, and its end. */
interface MariaDbAdapterLike {
  underlyingDriver(): { getConnection(): Promise<MariaDbConnectionLike> };
  dispose(): Promise<void>;
}

/**
 * How long the executor's pool stays open with nothing to run: a polling relay keeps it open, a
 * stopped app lets it end (the `mariadb` pool keeps the process alive while open).
 */
const IDLE_END_MS = 5_000;

/**
 * Values in mysql2's shapes, which the MySQL dialect reads: BIGINT as a number (a string past
 * 2^53, as mysql2's `supportBigNumbers`), DECIMAL as a string, binary as a Buffer, DATETIME a Date.
 */
function mysqlValue(value: unknown): unknown {
  if (typeof value === 'bigint') {
    return value <= BigInt(Number.MAX_SAFE_INTEGER) && value >= BigInt(Number.MIN_SAFE_INTEGER)
      ? Number(value)
      : value.toString();
  }
  if (isDecimal(value)) return String(value);
  return asBuffer(value);
}

/** A `mariadb` result as the store's rows: a row array (SELECT, RETURNING) or an OK packet. */
function toRows(result: unknown): SqlRows {
  if (Array.isArray(result)) {
    const rows = result.map((row: Record<string, unknown>) => {
      for (const column of Object.keys(row)) row[column] = mysqlValue(row[column]);
      return row;
    });
    return { rows, affected: rows.length };
  }
  return { rows: [], affected: Number((result as { affectedRows?: number }).affectedRows ?? 0) };
}

function send(connection: MariaDbConnectionLike, statement: SqlStatement): Promise<unknown> {
  return connection.query({ sql: statement.text }, statement.params);
}

/**
 * Statements on one `mariadb` pooled connection. The driver's errors carry `errno` and `code`
 * (`ER_DUP_ENTRY`) as mysql2's do, so they go to the dialect as they are.
 */
class MariaDbConnection implements SqlConnection {
  constructor(private readonly connection: MariaDbConnectionLike) {}

  async query(statement: SqlStatement): Promise<SqlRows> {
    return toRows(await send(this.connection, statement));
  }

  /** The driver pipelines: both are written to the connection before either answer is read. */
  async queryBackToBack(first: SqlStatement, second: SqlStatement): Promise<SqlRows> {
    const [, result] = await Promise.allSettled([
      send(this.connection, first),
      send(this.connection, second),
    ]);
    if (result.status === 'rejected') throw result.reason;
    return toRows(result.value);
  }
}

function mariadbTxConnection(tx: PrismaLike): SqlConnection {
  return new PrismaTxConnection(tx, 'mysql', mysqlValue);
}

/**
 * `'T'` while the interactive transaction is open, `'I'` once it is over (Prisma refuses a
 * statement in a closed interactive transaction with P2028). MySQL has no failed state: a
 * transaction stays open after a failed statement.
 */
async function transactionStatus(tx: PrismaLike): Promise<'I' | 'T' | 'E'> {
  try {
    const rows = await tx.$queryRawUnsafe('SELECT @@in_transaction AS open');
    return Number(rows[0]?.open) === 1 ? 'T' : 'I';
  } catch (error) {
    if ((error as { code?: unknown }).code === 'P2028') return 'I';
    throw withDriverError(error, 'mysql');
  }
}

/**
 * The SQL store over Prisma 7 with its MariaDB driver adapter (`@prisma/adapter-mariadb`, which
 * speaks to MariaDB and MySQL through the `mariadb` driver). The adapter keeps its pool and its
 * connection options out of reach, so the store's own statements run on a pool of the executor's,
 * opened with the adapter factory's own `connect()` (the same options, the same driver: nothing
 * else to install) on the first statement, and ended after `IDLE_END_MS` without any. A caller's
 * transaction is the client `prisma.$transaction(async (tx) => …)` hands its callback; the
 * store's statements in it go through that client's raw queries. No commit hook: see
 * `CommitWatch.inTransaction` for what replaces it.
 */
export class PrismaMariaDbExecutor implements SqlExecutor {
  readonly sqlExecutor = true;
  readonly client = 'Prisma';
  readonly txOption = 'tx';
  readonly dialect = 'mysql';
  private adapter: Promise<MariaDbAdapterLike> | undefined;
  private busy = 0;
  private idle: NodeJS.Timeout | undefined;

  constructor(
    private readonly prisma: PrismaLike,
    private readonly factory: { connect(): Promise<unknown> },
  ) {}

  /** A connection of the executor's pool, opened on first use and again after an idle end. */
  private async acquire(): Promise<MariaDbConnectionLike> {
    this.busy++;
    clearTimeout(this.idle);
    try {
      this.adapter ??= (this.factory.connect() as Promise<MariaDbAdapterLike>).catch(
        (error: unknown) => {
          this.adapter = undefined;
          throw error;
        },
      );
      return await (await this.adapter).underlyingDriver().getConnection();
    } catch (error) {
      this.done();
      throw error;
    }
  }

  private done(): void {
    if (--this.busy > 0) return;
    this.idle = setTimeout(() => {
      const adapter = this.adapter;
      this.adapter = undefined;
      void adapter?.then((a) => a.dispose()).catch(() => undefined);
    }, IDLE_END_MS);
    this.idle.unref();
  }

  /**
   * Ends the executor's own pool now (the store calls this when the app closes), rather than
   * `IDLE_END_MS` later: until then its connections would keep the process alive. A statement
   * after this opens another pool, ended in turn once idle.
   */
  async close(): Promise<void> {
    clearTimeout(this.idle);
    this.idle = undefined;
    const adapter = this.adapter;
    this.adapter = undefined;
    await adapter?.then((a) => a.dispose()).catch(() => undefined);
  }

  private async release(connection: MariaDbConnectionLike, broken = false): Promise<void> {
    try {
      if (broken) connection.destroy();
      else await connection.release();
    } finally {
      this.done();
    }
  }

  /** From `VERSION()`, once (see `serverFlavorOnce`). */
  readonly serverFlavor = serverFlavorOnce((statement) => this.query(statement));

  query(statement: SqlStatement): Promise<SqlRows> {
    return this.connection((c) => c.query(statement));
  }

  async connection<T>(fn: (connection: SqlConnection) => Promise<T>): Promise<T> {
    const connection = await this.acquire();
    try {
      return await fn(new MariaDbConnection(connection));
    } finally {
      await this.release(connection);
    }
  }

  async transaction<T>(
    fn: (connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    const connection = await this.acquire();
    let broken = false;
    try {
      try {
        // Without a scope, SET TRANSACTION sets the next transaction's isolation only: a
        // connection that could not start that transaction is not given back with it pending.
        if (options.isolation) {
          await send(connection, {
            text: `SET TRANSACTION ISOLATION LEVEL ${options.isolation}`,
            params: [],
          });
        }
        await send(connection, { text: 'START TRANSACTION', params: [] });
      } catch (error) {
        broken = true;
        throw error;
      }
      try {
        const result = await fn(new MariaDbConnection(connection));
        await send(connection, { text: 'COMMIT', params: [] });
        return result;
      } catch (error) {
        // A connection that cannot roll back is not given back to the pool.
        await send(connection, { text: 'ROLLBACK', params: [] }).catch(() => (broken = true));
        throw error;
      }
    } finally {
      await this.release(connection, broken);
    }
  }

  /** An interactive transaction of this client: `tx` is what the app writes through. */
  clientTransaction<T>(
    fn: (tx: unknown, connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    return this.prisma.$transaction(
      (tx) => fn(tx, mariadbTxConnection(tx)),
      options.isolation ? { isolationLevel: ISOLATION[options.isolation] } : undefined,
    );
  }

  ownsClient(value: unknown): boolean {
    return ownsPrismaClient(this.prisma, value);
  }

  /** An interactive-transaction client of this PrismaClient, inside its open transaction. */
  transactionOf(tx: unknown): Promise<CallerTransaction> {
    return callerTransaction(this.prisma, tx, transactionStatus, mariadbTxConnection);
  }
}
