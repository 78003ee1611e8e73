import { refuseTypeOrmTx, requireOpenTransaction } from './caller-transaction-checks';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxValidationError } from '../errors/outbox-validation.error';
import { assertInstalled } from '../optional-peers';
import { pgExecutor } from './pg-executor';
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

const HOW_TO_TX =
  'Pass the client of your interactive transaction: await prisma.$transaction(async (tx) => { …; ' +
  'await outbox.append(events, { tx }); }). Or omit tx to let the outbox commit the event in its own transaction.';
const PRISMA_TX = { client: 'Prisma', executorCall: 'prismaExecutor(prisma)', howTo: HOW_TO_TX };

/**
 * Where Prisma keeps the interactive transaction a client runs in (`@prisma/client` 7,
 * getPrismaClient.ts: `{ kind: 'nested', txId, … }` on the client `$transaction` hands its
 * callback; absent on the root client). Not public API: read only to tell a transaction's client
 * from the root one, and checked.
 */
const TX_SCOPE_CONTEXT = Symbol.for('prisma.client.transaction.scope_context');

/** Prisma's names of the isolation levels (`Prisma.TransactionIsolationLevel`). */
const ISOLATION: Record<SqlIsolationLevel, string> = {
  'READ UNCOMMITTED': 'ReadUncommitted',
  'READ COMMITTED': 'ReadCommitted',
  'REPEATABLE READ': 'RepeatableRead',
  SERIALIZABLE: 'Serializable',
};

/** The parts of a `PrismaClient` (root, extended, or an interactive transaction's) the executor uses. */
interface PrismaLike {
  $queryRawUnsafe(text: string, ...params: unknown[]): Promise<Array<Record<string, any>>>;
  $executeRawUnsafe(text: string, ...params: unknown[]): Promise<number>;
  $transaction<T>(
    fn: (tx: PrismaLike) => Promise<T>,
    options?: { isolationLevel?: string },
  ): Promise<T>;
  /** The query engine, shared by a client, its `$extends` clients and its transactions. */
  _engine?: object;
  /** The client's options as Prisma keeps them: `adapter` is the driver adapter factory. */
  _engineConfig?: { adapter?: { adapterName?: string; config?: unknown; externalPool?: unknown } };
}

/** The parts of a `pg` `Pool` the executor needs. */
interface PgPoolLike {
  connect(): Promise<unknown>;
  query(...args: unknown[]): Promise<unknown>;
}

function isPrismaClient(value: unknown): value is PrismaLike {
  const v = value as Record<string, unknown> | null;
  return (
    typeof v === 'object' &&
    v !== null &&
    typeof v.$queryRawUnsafe === 'function' &&
    typeof v.$executeRawUnsafe === 'function' &&
    typeof v.$transaction === 'function'
  );
}

function inTransaction(client: PrismaLike): boolean {
  return (client as unknown as Record<symbol, unknown>)[TX_SCOPE_CONTEXT] !== undefined;
}

/**
 * Prisma reports a failed raw statement as a `PrismaClientKnownRequestError` P2010 whose
 * `meta.driverAdapterError.cause` holds the driver's code (`originalCode`, PostgreSQL's SQLSTATE;
 * `code` for the errors the adapter does not classify). The dialects read `error.driverError`:
 * set it, so a unique violation or a deadlock is told from other failures as with `pg`.
 */
function withDriverError(error: unknown): unknown {
  const e = error as {
    meta?: { driverAdapterError?: { cause?: Record<string, unknown> } };
    driverError?: unknown;
  } | null;
  const cause = e?.meta?.driverAdapterError?.cause;
  if (cause && e && e.driverError === undefined) {
    e.driverError = {
      code: cause.originalCode ?? cause.code,
      message: cause.originalMessage ?? cause.message,
    };
  }
  return error;
}

/**
 * Prisma's raw results in `pg`'s shapes, which the dialect reads: `bigint` columns (`seq`,
 * `count(*)`) as strings, not BigInt; `numeric` as strings, not Decimal; `bytea` as a Buffer.
 * Timestamps are Dates and `json`/`jsonb` parsed values in both.
 */
function pgValue(value: unknown): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (value instanceof Uint8Array && !Buffer.isBuffer(value)) {
    return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  }
  if (value !== null && typeof value === 'object' && value.constructor?.name === 'Decimal') {
    return String(value);
  }
  return value;
}

/** Statements whose rows the store reads; the others run as commands, which report a count. */
const RETURNS_ROWS = /^\s*(SELECT|WITH|VALUES)\b|\bRETURNING\b/i;

/**
 * Statements in a caller's interactive transaction, through its client's raw queries (Prisma
 * does not expose the connection of an interactive transaction). `$queryRawUnsafe` returns rows
 * but no count, `$executeRawUnsafe` a count but no rows: a statement goes to the one that gives
 * what the store reads of it.
 */
class PrismaTxConnection implements SqlConnection {
  constructor(private readonly tx: PrismaLike) {}

  async query(statement: SqlStatement): Promise<SqlRows> {
    const params = statement.params as unknown[];
    try {
      if (!RETURNS_ROWS.test(statement.text)) {
        return { rows: [], affected: await this.tx.$executeRawUnsafe(statement.text, ...params) };
      }
      const rows = (await this.tx.$queryRawUnsafe(statement.text, ...params)).map((row) => {
        for (const column of Object.keys(row)) row[column] = pgValue(row[column]);
        return row;
      });
      return { rows, affected: rows.length };
    } catch (error) {
      throw withDriverError(error);
    }
  }
}

/**
 * `'T'` in a transaction, `'E'` in a failed one, `'I'` when it is over (Prisma refuses a
 * statement in a closed interactive transaction with P2028). One statement, as in `pgExecutor`.
 */
async function transactionStatus(tx: PrismaLike): Promise<'I' | 'T' | 'E'> {
  try {
    const rows = await tx.$queryRawUnsafe(
      'SELECT transaction_timestamp() <> statement_timestamp() AS open',
    );
    return rows[0]?.open === true ? 'T' : 'I';
  } catch (error) {
    const e = withDriverError(error) as { code?: unknown; driverError?: { code?: unknown } };
    if (e.driverError?.code === '25P02') return 'E';
    if (e.code === 'P2028') return 'I';
    throw error;
  }
}

/**
 * The SQL store over Prisma 7 with its PostgreSQL driver adapter (`@prisma/adapter-pg`). The
 * store's own statements run on a `pg` `Pool` exactly as with `pgExecutor(pool)` (pg's result
 * types, named prepared statements, the wake-up listener): the adapter's own pool when it was
 * given one (`new PrismaPg(pool)`), else a pool of the executor's with the adapter's connection
 * options. A caller's transaction is the client `prisma.$transaction(async (tx) => …)` hands its
 * callback; the store's statements in it go through that client's raw queries. Prisma has no
 * commit hook: wake-ups are a NOTIFY inside the caller's transaction, as for pg.
 */
class PrismaExecutor implements SqlExecutor {
  readonly sqlExecutor = true;
  readonly client = 'Prisma';
  readonly txOption = 'tx';
  readonly dialect = 'postgres';
  private readonly pg: SqlExecutor;

  constructor(
    private readonly prisma: PrismaLike,
    private readonly pool: PgPoolLike,
  ) {
    this.pg = pgExecutor(pool);
  }

  query(statement: SqlStatement): Promise<SqlRows> {
    return this.pg.query(statement);
  }

  connection<T>(fn: (connection: SqlConnection) => Promise<T>): Promise<T> {
    return this.pg.connection(fn);
  }

  transaction<T>(
    fn: (connection: SqlConnection) => Promise<T>,
    options?: { isolation?: SqlIsolationLevel },
  ): Promise<T> {
    return this.pg.transaction(fn, options);
  }

  /** An interactive transaction of this client: `tx` is what the app writes through. */
  clientTransaction<T>(
    fn: (tx: unknown, connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    return this.prisma.$transaction(
      (tx) => fn(tx, new PrismaTxConnection(tx)),
      options.isolation ? { isolationLevel: ISOLATION[options.isolation] } : undefined,
    );
  }

  /** This PrismaClient, or a `$extends` client of it, outside any transaction. */
  ownsClient(value: unknown): boolean {
    return (
      value === this.prisma ||
      (isPrismaClient(value) && value._engine === this.prisma._engine && !inTransaction(value))
    );
  }

  /** An interactive-transaction client of this PrismaClient, inside its open transaction. */
  async transactionOf(tx: unknown): Promise<CallerTransaction> {
    refuseTypeOrmTx(tx, PRISMA_TX);
    if (!isPrismaClient(tx)) {
      const t = tx as Record<string, unknown> | null;
      const pg = typeof t?.query === 'function' && typeof t?.connect === 'function';
      throw new OutboxValidationError(
        'options.tx',
        pg || (typeof t?.query === 'function' && typeof t?.release === 'function')
          ? `is a pg Pool or PoolClient, but this store (prismaExecutor) takes Prisma's transaction client. ${HOW_TO_TX}`
          : `is not a Prisma transaction client, got ${describeValue(tx)}. ${HOW_TO_TX}`,
      );
    }
    if (tx._engine !== this.prisma._engine) {
      throw new OutboxValidationError(
        'options.tx',
        `is a transaction of another PrismaClient than the one given to prismaExecutor(prisma): it may be on another database. ${HOW_TO_TX}`,
      );
    }
    if (!inTransaction(tx)) {
      throw new OutboxValidationError(
        'options.tx',
        `is the PrismaClient itself, not a transaction: a write through it commits on its own. ${HOW_TO_TX}`,
      );
    }
    requireOpenTransaction(
      await transactionStatus(tx),
      'is not inside an open transaction (its $transaction() callback has already returned), ' +
        `so the event could be committed without your business write. ${HOW_TO_TX}`,
    );
    const key = (tx as unknown as Record<symbol, object>)[TX_SCOPE_CONTEXT];
    return { connection: new PrismaTxConnection(tx), key };
  }

  /** A new `pg` Client with the pool's connection options, as for `pgExecutor(pool)`. */
  listenerConnection(): ListenerConnection | null {
    return this.pg.listenerConnection?.() ?? null;
  }
}

/**
 * The executor of the 'sql' store for Prisma 7 on PostgreSQL: `store: { type: 'sql', executor:
 * prismaExecutor(prisma) }` with `prisma = new PrismaClient({ adapter: new PrismaPg(…) })`.
 * `@prisma/client`, `@prisma/adapter-pg` and `pg` are optional peers: a missing one is named with
 * its install command.
 */
export function prismaExecutor(prisma: unknown): SqlExecutor {
  assertInstalled('The Prisma executor (prismaExecutor)', [
    '@prisma/client',
    '@prisma/adapter-pg',
    'pg',
  ]);
  const HOW =
    "prismaExecutor(prisma) needs a PrismaClient over PostgreSQL's driver adapter (new PrismaClient({ adapter: new PrismaPg(…) }) from '@prisma/adapter-pg')";
  if (!isPrismaClient(prisma)) {
    throw new OutboxOptionsError('store.executor', `${HOW}, got ${describeValue(prisma)}`);
  }
  if (inTransaction(prisma)) {
    throw new OutboxOptionsError(
      'store.executor',
      `${HOW}, got the client of an interactive transaction (tx): pass the PrismaClient, and tx to append() as { tx }`,
    );
  }
  const adapter = prisma._engineConfig?.adapter;
  if (adapter?.adapterName !== '@prisma/adapter-pg') {
    throw new OutboxOptionsError(
      'store.executor',
      `${HOW}, got one with ${adapter?.adapterName ? `the driver adapter ${adapter.adapterName}` : 'no driver adapter'}`,
    );
  }
  return new PrismaExecutor(prisma, poolOf(adapter));
}

/**
 * The `pg` Pool for the store's own statements: the one given to `new PrismaPg(pool)`, else one
 * with the options given to `new PrismaPg(config)` (the adapter keeps its own pool out of reach).
 * That pool lets the process exit while idle: nothing closes it but the end of the process.
 */
function poolOf(adapter: { config?: unknown; externalPool?: unknown }): PgPoolLike {
  if (adapter.externalPool) return adapter.externalPool as PgPoolLike;
  const { Pool } = require('pg') as { Pool: new (config: object) => PgPoolLike };
  const config =
    typeof adapter.config === 'object' && adapter.config !== null ? adapter.config : {};
  return new Pool({ ...config, allowExitOnIdle: true });
}
