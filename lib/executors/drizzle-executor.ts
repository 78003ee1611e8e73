import { refuseTypeOrmTx, requireOpenTransaction } from './caller-transaction-checks';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxValidationError } from '../errors/outbox-validation.error';
import { assertInstalled } from '../optional-peers';
import { drizzleMysqlExecutor } from './drizzle-mysql';
import { PooledStatements } from './pooled-statements';
import { PgClientLike, PgConnection, pgExecutor, transactionStatus } from './pg-executor';
import {
  CallerTransaction,
  describeValue,
  ListenerConnection,
  SqlConnection,
  SqlExecutor,
  SqlIsolationLevel,
} from './sql-executor';

const HOW_TO_TX =
  "Pass Drizzle's transaction: await db.transaction(async (tx) => { …; await outbox.append(events, { tx }); }). " +
  'Or omit tx to let the outbox commit the event in its own transaction.';
const DRIZZLE_TX = { client: 'Drizzle', executorCall: 'drizzleExecutor(db)', howTo: HOW_TO_TX };

/** What the executor loads from drizzle-orm, lazily (an optional peer). */
interface DrizzleModules {
  is(value: unknown, type: unknown): boolean;
  PgDatabase: unknown;
  PgTransaction: unknown;
}

function drizzleModules(): DrizzleModules {
  const { is } = require('drizzle-orm') as { is: DrizzleModules['is'] };
  const { PgDatabase, PgTransaction } = require('drizzle-orm/pg-core') as {
    PgDatabase: unknown;
    PgTransaction: unknown;
  };
  return { is, PgDatabase, PgTransaction };
}

/** Drizzle's `db.transaction(cb, config)`. */
interface DrizzleTransactional {
  transaction<T>(fn: (tx: object) => Promise<T>, config?: { isolationLevel: string }): Promise<T>;
}

/** The parts of a `pg` `Pool` the executor checks (it hands the pool to `pgExecutor`). */
interface PgPoolLike {
  connect(): Promise<unknown>;
  query(...args: unknown[]): Promise<unknown>;
  /** pg-pool's own list of its clients (not public API; used only to refuse a stranger client). */
  _clients?: unknown[];
}

function isPool(value: unknown): value is PgPoolLike {
  const p = value as Record<string, unknown> | null;
  return (
    typeof p === 'object' &&
    p !== null &&
    typeof p.connect === 'function' &&
    typeof p.query === 'function' &&
    typeof p.release !== 'function' &&
    // pg-pool's counters: a pg Client has connect() and query() too.
    'totalCount' in p
  );
}

/**
 * The `pg` client a Drizzle transaction runs on. Drizzle's public `tx.execute(sql)` is not used
 * for the store's statements: its node-postgres session returns timestamps and dates as strings
 * (it overrides pg's type parsers), renumbers parameters, and keeps no named prepared statements,
 * where the store expects pg's own results. The `PoolClient` of the transaction is the session's
 * `client` field (drizzle-orm 0.45: `NodePgSession.client`, private in its types, set by
 * `db.transaction()` to `await pool.connect()`). Not public API, so it is checked: anything
 * without a pg client's `query` there is refused with a message, not used.
 */
function clientOf(tx: object): PgClientLike | undefined {
  const session = (tx as { session?: { client?: unknown } }).session;
  const client = session?.client as Record<string, unknown> | undefined;
  return typeof client === 'object' &&
    client !== null &&
    typeof client.query === 'function' &&
    typeof client.release === 'function'
    ? (client as unknown as PgClientLike)
    : undefined;
}

/**
 * The SQL store over Drizzle (drizzle-orm's node-postgres driver): the store's own statements run
 * on the `pg` `Pool` under the Drizzle database (`db.$client`), exactly as with `pgExecutor(pool)`
 * (prepared statements, wake-ups, the listener's own connection); a caller's transaction is
 * Drizzle's `tx` of `db.transaction(async (tx) => …)`, whose statements run on its `PoolClient`.
 * Drizzle has no commit hook: wake-ups are a NOTIFY inside the caller's transaction, as for pg.
 */
class DrizzleExecutor extends PooledStatements implements SqlExecutor {
  readonly sqlExecutor = true;
  readonly client = 'Drizzle';
  readonly txOption = 'tx';
  readonly dialect = 'postgres';

  constructor(
    private readonly db: object,
    private readonly pool: PgPoolLike,
  ) {
    super(pgExecutor(pool));
  }

  /**
   * `db.transaction(cb, { isolationLevel })`: `fn` gets Drizzle's `tx`, and the store's statements
   * run on the `PoolClient` under it, as for a caller's `tx` (see `clientOf`).
   */
  clientTransaction<T>(
    fn: (tx: unknown, connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    const db = this.db as DrizzleTransactional;
    const config = options.isolation
      ? { isolationLevel: options.isolation.toLowerCase() }
      : undefined;
    return db.transaction(async (tx) => {
      const client = clientOf(tx);
      if (!client) {
        throw new OutboxOptionsError(
          'store.executor',
          "drizzleExecutor(db): the Drizzle transaction runs on no node-postgres PoolClient (another driver than 'drizzle-orm/node-postgres'?)",
        );
      }
      return fn(tx, new PgConnection(client));
    }, config);
  }

  ownsClient(value: unknown): boolean {
    return value === this.db;
  }

  /** Drizzle's `tx` (a `PgTransaction`) of this database, inside its open transaction. */
  async transactionOf(tx: unknown): Promise<CallerTransaction> {
    const t = tx as Record<string, unknown> | null;
    refuseTypeOrmTx(tx, DRIZZLE_TX);
    const { is, PgDatabase, PgTransaction } = drizzleModules();
    if (typeof t !== 'object' || t === null || !is(t, PgTransaction)) {
      if (t === this.db || (typeof t === 'object' && t !== null && is(t, PgDatabase))) {
        throw new OutboxValidationError(
          'options.tx',
          `is the Drizzle database (db), not a transaction: a write through it commits on its own. ${HOW_TO_TX}`,
        );
      }
      if ((t as unknown) === this.pool || isPool(t)) {
        throw new OutboxValidationError(
          'options.tx',
          `is a pg Pool, which has no transaction of its own. ${HOW_TO_TX}`,
        );
      }
      const pgClient = typeof t?.query === 'function' && typeof t?.release === 'function';
      throw new OutboxValidationError(
        'options.tx',
        pgClient
          ? `is a pg PoolClient, but this store (drizzleExecutor) takes Drizzle's transaction object. ${HOW_TO_TX} ` +
              "For a PoolClient after BEGIN, use store: { type: 'sql', executor: pgExecutor(pool) }."
          : `is not a Drizzle PostgreSQL transaction, got ${describeValue(tx)}. ${HOW_TO_TX}`,
      );
    }
    const client = clientOf(t);
    if (!client) {
      throw new OutboxValidationError(
        'options.tx',
        "is a Drizzle transaction, but not on a node-postgres PoolClient (another driver than 'drizzle-orm/node-postgres', " +
          'or a drizzle-orm version whose transaction keeps its connection elsewhere). ' +
          'drizzleExecutor(db) takes a transaction of the database it was given.',
      );
    }
    const clients = this.pool._clients;
    if (Array.isArray(clients) && !clients.includes(client)) {
      throw new OutboxValidationError(
        'options.tx',
        `is a transaction of another Drizzle database than the one given to drizzleExecutor(db): it may be on another database. ${HOW_TO_TX}`,
      );
    }
    requireOpenTransaction(
      await transactionStatus(client),
      'is not inside an open transaction (its db.transaction() callback has already returned), ' +
        `so the event could be committed without your business write. ${HOW_TO_TX}`,
    );
    return { connection: new PgConnection(client), key: client };
  }

  /** A new `pg` Client with the pool's connection options, as for `pgExecutor(pool)`. */
  listenerConnection(): ListenerConnection | null {
    return this.pooled.listenerConnection?.() ?? null;
  }
}

/**
 * The executor of the 'sql' store for Drizzle on PostgreSQL (drizzle-orm's node-postgres driver):
 * `store: { type: 'sql', executor: drizzleExecutor(db) }` with `db = drizzle({ client: pool })`.
 * `drizzle-orm` and `pg` are optional peers: a missing one is named with its install command.
 */
export function drizzleExecutor(db: unknown): SqlExecutor {
  // MySQL/MariaDB (drizzle-orm/mysql2): lib/executors/drizzle-mysql.ts.
  const mysql = drizzleMysqlExecutor(db);
  if (mysql) return mysql;
  assertInstalled('The Drizzle executor (drizzleExecutor)', ['drizzle-orm', 'pg']);
  const { is, PgDatabase, PgTransaction } = drizzleModules();
  const HOW =
    "drizzleExecutor(db) needs a Drizzle PostgreSQL database over a pg Pool (drizzle({ client: new Pool(…) }) from 'drizzle-orm/node-postgres')";
  if (typeof db !== 'object' || db === null || !is(db, PgDatabase)) {
    throw new OutboxOptionsError('store.executor', `${HOW}, got ${describeValue(db)}`);
  }
  if (is(db, PgTransaction)) {
    throw new OutboxOptionsError(
      'store.executor',
      `${HOW}, got a Drizzle transaction (tx): pass the database, and tx to append() as { tx }`,
    );
  }
  // `db.$client` is what drizzle() was given (drizzle-orm ≥ 0.33; a Pool when given a Pool or a
  // connection). A single pg Client cannot run the outbox's transactions beside the app's.
  const pool = (db as { $client?: unknown }).$client;
  if (!isPool(pool)) {
    throw new OutboxOptionsError(
      'store.executor',
      `${HOW}, got one over ${describeValue(pool)}: a single connection cannot run the outbox's transactions beside yours`,
    );
  }
  return new DrizzleExecutor(db, pool);
}
