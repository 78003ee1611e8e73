import { refuseTypeOrmTx, requireOpenTransaction } from './caller-transaction-checks';
import { OutboxValidationError } from '../errors/outbox-validation.error';
import {
  CallerTransaction,
  describeValue,
  SqlConnection,
  SqlIsolationLevel,
  SqlRows,
  SqlStatement,
} from './sql-executor';

/**
 * What `prismaExecutor(prisma)` does the same way whatever the driver adapter (PostgreSQL's,
 * MariaDB's): recognise the client and its interactive transactions, run the store's statements
 * in one through its raw queries, and refuse what is not one.
 */

export const HOW_TO_TX =
  'Pass the client of your interactive transaction: await prisma.$transaction(async (tx) => { …; ' +
  'await outbox.append(events, { tx }); }). Or omit tx to let the outbox commit the event in its own transaction.';
export const PRISMA_TX = {
  client: 'Prisma',
  executorCall: 'prismaExecutor(prisma)',
  howTo: HOW_TO_TX,
};

/**
 * Where Prisma keeps the interactive transaction a client runs in (`@prisma/client` 7,
 * getPrismaClient.ts: `{ kind: 'nested', txId, … }` on the client `$transaction` hands its
 * callback; absent on the root client). Not public API: read only to tell a transaction's client
 * from the root one, and checked.
 */
const TX_SCOPE_CONTEXT = Symbol.for('prisma.client.transaction.scope_context');

/** Prisma's names of the isolation levels (`Prisma.TransactionIsolationLevel`). */
export const ISOLATION: Record<SqlIsolationLevel, string> = {
  'READ UNCOMMITTED': 'ReadUncommitted',
  'READ COMMITTED': 'ReadCommitted',
  'REPEATABLE READ': 'RepeatableRead',
  SERIALIZABLE: 'Serializable',
};

/** The driver adapter factory a PrismaClient was given (`new PrismaPg(…)`, `new PrismaMariaDb(…)`). */
export interface AdapterFactoryLike {
  adapterName?: string;
  /** `@prisma/adapter-pg`: the options or the pool it was given. */
  config?: unknown;
  externalPool?: unknown;
  /** Opens a new adapter on a new pool of the factory's connection options. */
  connect?(): Promise<unknown>;
}

/** The parts of a `PrismaClient` (root, extended, or an interactive transaction's) the executor uses. */
export interface PrismaLike {
  $queryRawUnsafe(text: string, ...params: unknown[]): Promise<Array<Record<string, any>>>;
  $executeRawUnsafe(text: string, ...params: unknown[]): Promise<number>;
  $transaction<T>(
    fn: (tx: PrismaLike) => Promise<T>,
    options?: { isolationLevel?: string },
  ): Promise<T>;
  /** The query engine, shared by a client, its `$extends` clients and its transactions. */
  _engine?: object;
  /** The client's options as Prisma keeps them: `adapter` is the driver adapter factory. */
  _engineConfig?: { adapter?: AdapterFactoryLike };
}

export function isPrismaClient(value: unknown): value is PrismaLike {
  const v = value as Record<string, unknown> | null;
  return (
    typeof v === 'object' &&
    v !== null &&
    typeof v.$queryRawUnsafe === 'function' &&
    typeof v.$executeRawUnsafe === 'function' &&
    typeof v.$transaction === 'function'
  );
}

export function inTransaction(client: PrismaLike): boolean {
  return (client as unknown as Record<symbol, unknown>)[TX_SCOPE_CONTEXT] !== undefined;
}

/**
 * Prisma reports a failed raw statement as a `PrismaClientKnownRequestError` P2010 whose
 * `meta.driverAdapterError.cause` holds the driver's code: `originalCode` (PostgreSQL's SQLSTATE,
 * MySQL's error number as text) or `code` for the errors the adapter does not classify. The
 * dialects read `error.driverError`: set it in the driver's shape (`code` for PostgreSQL,
 * `errno` for MySQL/MariaDB), so a unique violation or a deadlock is told from other failures.
 */
export function withDriverError(error: unknown, dialect: 'postgres' | 'mysql'): unknown {
  const e = error as {
    meta?: { driverAdapterError?: { cause?: Record<string, unknown> } };
    driverError?: unknown;
  } | null;
  const cause = e?.meta?.driverAdapterError?.cause;
  if (cause && e && e.driverError === undefined) {
    const code = cause.originalCode ?? cause.code;
    const message = cause.originalMessage ?? cause.message;
    e.driverError =
      dialect === 'postgres'
        ? { code, message }
        : { errno: Number(code), sqlState: cause.state, message };
  }
  return error;
}

/** Statements whose rows the store reads; the others run as commands, which report a count. */
const RETURNS_ROWS = /^\s*(SELECT|WITH|VALUES|SHOW)\b|\bRETURNING\b/i;

/**
 * Statements in a caller's interactive transaction, through its client's raw queries (Prisma
 * does not expose the connection of an interactive transaction). `$queryRawUnsafe` returns rows
 * but no count, `$executeRawUnsafe` a count but no rows: a statement goes to the one that gives
 * what the store reads of it. `value` turns Prisma's values into the driver's the dialect reads.
 */
export class PrismaTxConnection implements SqlConnection {
  constructor(
    private readonly tx: PrismaLike,
    private readonly dialect: 'postgres' | 'mysql',
    private readonly value: (value: unknown) => unknown,
  ) {}

  async query(statement: SqlStatement): Promise<SqlRows> {
    const params = statement.params as unknown[];
    try {
      if (!RETURNS_ROWS.test(statement.text)) {
        return { rows: [], affected: await this.tx.$executeRawUnsafe(statement.text, ...params) };
      }
      const rows = (await this.tx.$queryRawUnsafe(statement.text, ...params)).map((row) => {
        for (const column of Object.keys(row)) row[column] = this.value(row[column]);
        return row;
      });
      return { rows, affected: rows.length };
    } catch (error) {
      throw withDriverError(error, this.dialect);
    }
  }
}

/** A `Uint8Array` Prisma returns for binary columns, as the Buffer drivers return. */
export function asBuffer(value: unknown): unknown {
  if (value instanceof Uint8Array && !Buffer.isBuffer(value)) {
    return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  }
  return value;
}

/**
 * Prisma's `Decimal` (decimal.js, whose instances tag themselves `[object Decimal]`; its class
 * name differs between Prisma's builds, `Decimal2` in some), as the string drivers return.
 */
export function isDecimal(value: unknown): boolean {
  return (
    value !== null &&
    typeof value === 'object' &&
    Object.prototype.toString.call(value) === '[object Decimal]'
  );
}

/**
 * The checks `transactionOf` makes of a caller's `tx` on every adapter: an interactive-transaction
 * client of `prisma`, whose transaction `status` says is open (`'T'`; `'E'` failed, `'I'` over).
 * `notPrisma` words the refusal of another client's object, where the adapter knows its driver.
 */
export async function callerTransaction(
  prisma: PrismaLike,
  tx: unknown,
  status: (tx: PrismaLike) => Promise<'I' | 'T' | 'E'>,
  connection: (tx: PrismaLike) => SqlConnection,
  notPrisma: (tx: Record<string, unknown> | null) => string | undefined = () => undefined,
): Promise<CallerTransaction> {
  refuseTypeOrmTx(tx, PRISMA_TX);
  if (!isPrismaClient(tx)) {
    throw new OutboxValidationError(
      'options.tx',
      notPrisma(tx as Record<string, unknown> | null) ??
        `is not a Prisma transaction client, got ${describeValue(tx)}. ${HOW_TO_TX}`,
    );
  }
  if (tx._engine !== prisma._engine) {
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
    await status(tx),
    'is not inside an open transaction (its $transaction() callback has already returned), ' +
      `so the event could be committed without your business write. ${HOW_TO_TX}`,
  );
  const key = (tx as unknown as Record<symbol, object>)[TX_SCOPE_CONTEXT];
  return { connection: connection(tx), key };
}

/** This PrismaClient, or a `$extends` client of it, outside any transaction. */
export function ownsPrismaClient(prisma: PrismaLike, value: unknown): boolean {
  return (
    value === prisma ||
    (isPrismaClient(value) && value._engine === prisma._engine && !inTransaction(value))
  );
}
