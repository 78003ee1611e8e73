import { PooledStatements } from './pooled-statements';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { assertInstalled } from '../optional-peers';
import { pgExecutor } from './pg-executor';
import { PrismaMariaDbExecutor } from './prisma-mariadb';
import {
  asBuffer,
  callerTransaction,
  HOW_TO_TX,
  inTransaction,
  isDecimal,
  isPrismaClient,
  ISOLATION,
  ownsPrismaClient,
  PrismaLike,
  PrismaTxConnection,
  withDriverError,
} from './prisma-shared';
import {
  CallerTransaction,
  describeValue,
  ListenerConnection,
  SqlConnection,
  SqlExecutor,
  SqlIsolationLevel,
} from './sql-executor';

/** The parts of a `pg` `Pool` the executor needs. */
interface PgPoolLike {
  connect(): Promise<unknown>;
  query(...args: unknown[]): Promise<unknown>;
}

/**
 * Prisma's raw results in `pg`'s shapes, which the dialect reads: `bigint` columns (`seq`,
 * `count(*)`) as strings, not BigInt; `numeric` as strings, not Decimal; `bytea` as a Buffer.
 * Timestamps are Dates and `json`/`jsonb` parsed values in both.
 */
function pgValue(value: unknown): unknown {
  if (typeof value === 'bigint' || isDecimal(value)) return String(value);
  return asBuffer(value);
}

function pgTxConnection(tx: PrismaLike): SqlConnection {
  return new PrismaTxConnection(tx, 'postgres', pgValue);
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
    const e = withDriverError(error, 'postgres') as {
      code?: unknown;
      driverError?: { code?: unknown };
    };
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
class PrismaExecutor extends PooledStatements implements SqlExecutor {
  readonly sqlExecutor = true;
  readonly client = 'Prisma';
  readonly txOption = 'tx';
  readonly dialect = 'postgres';

  constructor(
    private readonly prisma: PrismaLike,
    private readonly pool: PgPoolLike,
  ) {
    super(pgExecutor(pool));
  }

  /** An interactive transaction of this client: `tx` is what the app writes through. */
  clientTransaction<T>(
    fn: (tx: unknown, connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    return this.prisma.$transaction(
      (tx) => fn(tx, pgTxConnection(tx)),
      options.isolation ? { isolationLevel: ISOLATION[options.isolation] } : undefined,
    );
  }

  /** This PrismaClient, or a `$extends` client of it, outside any transaction. */
  ownsClient(value: unknown): boolean {
    return ownsPrismaClient(this.prisma, value);
  }

  /** An interactive-transaction client of this PrismaClient, inside its open transaction. */
  transactionOf(tx: unknown): Promise<CallerTransaction> {
    return callerTransaction(this.prisma, tx, transactionStatus, pgTxConnection, (t) =>
      typeof t?.query === 'function' &&
      (typeof t?.connect === 'function' || typeof t?.release === 'function')
        ? `is a pg Pool or PoolClient, but this store (prismaExecutor) takes Prisma's transaction client. ${HOW_TO_TX}`
        : undefined,
    );
  }

  /** A new `pg` Client with the pool's connection options, as for `pgExecutor(pool)`. */
  listenerConnection(): ListenerConnection | null {
    return this.pooled.listenerConnection?.() ?? null;
  }
}

const PG_ADAPTER = '@prisma/adapter-pg';
const MARIADB_ADAPTER = '@prisma/adapter-mariadb';

/**
 * The executor of the 'sql' store for Prisma 7 on PostgreSQL or MySQL/MariaDB: `store: { type:
 * 'sql', executor: prismaExecutor(prisma) }` with `prisma = new PrismaClient({ adapter: new
 * PrismaPg(…) })` or `new PrismaMariaDb(…)`. `@prisma/client` and the adapter's packages
 * (`@prisma/adapter-pg` and `pg`, or `@prisma/adapter-mariadb`) are optional peers: a missing one
 * is named with its install command.
 */
export function prismaExecutor(prisma: unknown): SqlExecutor {
  const adapter = isPrismaClient(prisma) ? prisma._engineConfig?.adapter : undefined;
  const mariadb = adapter?.adapterName === MARIADB_ADAPTER;
  assertInstalled(
    'The Prisma executor (prismaExecutor)',
    mariadb ? ['@prisma/client', MARIADB_ADAPTER] : ['@prisma/client', PG_ADAPTER, 'pg'],
  );
  const HOW =
    "prismaExecutor(prisma) needs a PrismaClient over a PostgreSQL or MariaDB driver adapter (new PrismaClient({ adapter: new PrismaPg(…) }) from '@prisma/adapter-pg', or new PrismaMariaDb(…) from '@prisma/adapter-mariadb')";
  if (!isPrismaClient(prisma)) {
    throw new OutboxOptionsError('store.executor', `${HOW}, got ${describeValue(prisma)}`);
  }
  if (inTransaction(prisma)) {
    throw new OutboxOptionsError(
      'store.executor',
      `${HOW}, got the client of an interactive transaction (tx): pass the PrismaClient, and tx to append() as { tx }`,
    );
  }
  if (mariadb && typeof adapter.connect === 'function') {
    return new PrismaMariaDbExecutor(prisma, adapter as Required<Pick<typeof adapter, 'connect'>>);
  }
  if (adapter?.adapterName !== PG_ADAPTER) {
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
