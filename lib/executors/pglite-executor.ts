import { refuseTypeOrmTx, requireOpenTransaction } from './caller-transaction-checks';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxValidationError } from '../errors/outbox-validation.error';
import {
  CallerTransaction,
  CommitHooks,
  describeValue,
  SqlConnection,
  SqlExecutor,
  SqlIsolationLevel,
  SqlRows,
  SqlStatement,
} from './sql-executor';

/** What a PGlite query resolves to (`Results` of `@electric-sql/pglite`), the parts used. */
interface PgliteResults {
  rows: Array<Record<string, any>>;
  affectedRows?: number;
  command?: string;
}

/** The parts of PGlite's `Transaction` the executor uses. */
interface PgliteTransactionLike {
  query(text: string, params?: unknown[]): Promise<PgliteResults>;
  rollback(): Promise<void>;
  readonly closed: boolean;
}

/** The parts of a `PGlite` instance (or `PGliteInterface`) the executor uses. */
interface PgliteLike {
  query(text: string, params?: unknown[]): Promise<PgliteResults>;
  transaction<T>(fn: (tx: PgliteTransactionLike) => Promise<T>): Promise<T>;
  exec(text: string): Promise<unknown>;
  readonly closed?: boolean;
}

const HOW_TO_TX =
  "Pass PGlite's transaction: await pg.transaction(async (tx) => { …; await outbox.append(events, { tx }); }). " +
  'Or omit tx to let the outbox commit the event in its own transaction.';

function toRows(result: PgliteResults): SqlRows {
  const rows = result.rows ?? [];
  // PGlite counts rows written (affectedRows) but not rows selected.
  const affected = result.command === 'SELECT' ? rows.length : (result.affectedRows ?? 0);
  return { rows, affected };
}

class PgliteConnection implements SqlConnection {
  constructor(private readonly client: Pick<PgliteLike, 'query'>) {}

  async query(statement: SqlStatement): Promise<SqlRows> {
    // PGlite keeps no named prepared statements: `statement.name` is ignored.
    return toRows(await this.client.query(statement.text, statement.params as unknown[]));
  }
}

function isPgliteTransaction(value: unknown): value is PgliteTransactionLike {
  const t = value as Record<string, unknown> | null;
  return (
    typeof t === 'object' &&
    t !== null &&
    typeof t.query === 'function' &&
    typeof t.rollback === 'function' &&
    typeof t.closed === 'boolean' &&
    typeof t.transaction !== 'function'
  );
}

/**
 * `'I'` for a transaction that has ended, `'E'` for one in which a statement failed (PGlite does
 * not say: one statement in it tells, failing with 25P02), else `'T'`.
 */
async function statusOf(tx: PgliteTransactionLike): Promise<'I' | 'T' | 'E'> {
  if (tx.closed) return 'I';
  try {
    await tx.query('SELECT 1');
    return 'T';
  } catch (error) {
    if ((error as { code?: unknown }).code === '25P02') return 'E';
    throw error;
  }
}

/**
 * The SQL store over PGlite (`@electric-sql/pglite`, PostgreSQL compiled to WASM, in-process), for
 * an app's tests without a database server. PGlite is one connection: its `transaction()` holds
 * it until the callback returns, and every other statement (the dispatcher's claims, the
 * outbox's own transactions) waits its turn. So the outbox's transactions run one after another,
 * never beside each other, and a statement issued outside a transaction that is open waits for
 * that transaction to end.
 *
 * A caller's transaction is PGlite's `tx`. PGlite has no commit hook and no second connection to
 * LISTEN on, so commits are watched by that queueing: one `SELECT 1` queued behind the caller's
 * transaction runs when it has ended, and reports it (as committed: a rollback cannot be told
 * apart, and then wakes the dispatcher for nothing).
 */
class PgliteExecutor implements SqlExecutor {
  readonly sqlExecutor = true;
  readonly client = 'PGlite';
  readonly txOption = 'tx';
  readonly dialect = 'postgres';
  private readonly hooks = new Set<CommitHooks>();
  /** Callers' transactions whose end is already awaited. */
  private readonly watched = new WeakSet<object>();

  constructor(private readonly pg: PgliteLike) {}

  async query(statement: SqlStatement): Promise<SqlRows> {
    return new PgliteConnection(this.pg).query(statement);
  }

  connection<T>(fn: (connection: SqlConnection) => Promise<T>): Promise<T> {
    return fn(new PgliteConnection(this.pg));
  }

  transaction<T>(
    fn: (connection: SqlConnection) => Promise<T>,
    options?: { isolation?: SqlIsolationLevel },
  ): Promise<T> {
    return this.clientTransaction((_tx, connection) => fn(connection), options);
  }

  clientTransaction<T>(
    fn: (tx: unknown, connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    return this.pg.transaction(async (tx) => {
      if (options.isolation) {
        await tx.query(`SET TRANSACTION ISOLATION LEVEL ${options.isolation}`);
      }
      return fn(tx, new PgliteConnection(tx));
    });
  }

  ownsClient(value: unknown): boolean {
    return value === this.pg;
  }

  /**
   * PGlite's `tx` inside its open transaction. PGlite's transaction object does not name its
   * database, so a `tx` of another PGlite instance cannot be told apart from this one's.
   */
  async transactionOf(tx: unknown): Promise<CallerTransaction> {
    refuseTypeOrmTx(tx, { client: 'PGlite', executorCall: 'pgliteExecutor(pg)', howTo: HOW_TO_TX });
    if (tx === this.pg || (typeof tx === 'object' && tx !== null && 'waitReady' in tx)) {
      throw new OutboxValidationError(
        'options.tx',
        `is the PGlite database, not a transaction: a write through it commits on its own. ${HOW_TO_TX}`,
      );
    }
    if (!isPgliteTransaction(tx)) {
      throw new OutboxValidationError(
        'options.tx',
        `is not a PGlite transaction, got ${describeValue(tx)}. ${HOW_TO_TX}`,
      );
    }
    requireOpenTransaction(
      await statusOf(tx),
      'is not inside an open transaction (its pg.transaction() callback has already returned), ' +
        `so the event could be committed without your business write. ${HOW_TO_TX}`,
    );
    this.watchEnd(tx);
    return { connection: new PgliteConnection(tx), key: tx };
  }

  watchCommits(hooks: CommitHooks): () => void {
    this.hooks.add(hooks);
    return () => this.hooks.delete(hooks);
  }

  /** Reports `tx` once its transaction has ended: see the class comment. */
  private watchEnd(tx: PgliteTransactionLike): void {
    if (this.hooks.size === 0 || this.watched.has(tx)) return;
    this.watched.add(tx);
    this.pg.query('SELECT 1').then(
      () => {
        for (const hooks of this.hooks) hooks.committed(tx);
      },
      // The database was closed meanwhile: nothing to wake.
      () => undefined,
    );
  }
}

/**
 * The executor of the 'sql' store for PGlite (`@electric-sql/pglite`): `store: { type: 'sql',
 * executor: pgliteExecutor(pg) }` with `pg = await PGlite.create()`. Meant for tests: PostgreSQL
 * in-process, no server. The executor loads nothing of PGlite; it only uses the instance given.
 */
export function pgliteExecutor(pg: unknown): SqlExecutor {
  const HOW =
    "pgliteExecutor(pg) needs a PGlite instance (await PGlite.create() from '@electric-sql/pglite')";
  if (isPgliteTransaction(pg)) {
    throw new OutboxOptionsError(
      'store.executor',
      `${HOW}, got a PGlite transaction (tx): pass the database, and tx to append() as { tx }`,
    );
  }
  const p = pg as Partial<PgliteLike> | null;
  if (
    typeof p !== 'object' ||
    p === null ||
    typeof p.query !== 'function' ||
    typeof p.transaction !== 'function' ||
    typeof p.exec !== 'function' ||
    !('waitReady' in p)
  ) {
    throw new OutboxOptionsError('store.executor', `${HOW}, got ${describeValue(pg)}`);
  }
  return new PgliteExecutor(p as PgliteLike);
}
