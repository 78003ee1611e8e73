import { refuseTypeOrmTx, requireOpenTransaction } from './caller-transaction-checks';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxValidationError } from '../errors/outbox-validation.error';
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

/** The parts of a `pg` client (`PoolClient`) the executor uses. */
export interface PgClientLike {
  query(config: { text: string; values: unknown[]; name?: string }): Promise<{
    rows?: Array<Record<string, any>>;
    rowCount?: number | null;
  }>;
  release?(destroy?: boolean | Error): void;
  /** `'I'` idle, `'T'` in a transaction, `'E'` in a failed one (pg ≥ 8.16); null before a query. */
  getTransactionStatus?(): string | null;
}

/** The parts of a `pg` `Pool` the executor uses. */
interface PgPoolLike extends Pick<PgClientLike, 'query'> {
  connect(): Promise<PgClientLike>;
  options?: Record<string, unknown>;
  Client?: new (config: Record<string, unknown>) => unknown;
  /** pg-pool's own list of its clients (not public API; used only to refuse a stranger client). */
  _clients?: unknown[];
}

const HOW_TO_TX =
  "Pass the PoolClient of your transaction: const client = await pool.connect(); await client.query('BEGIN'); " +
  "… append(events, { tx: client }) …; await client.query('COMMIT'); client.release(). " +
  'Or omit tx to let the outbox commit the event in its own transaction.';
const PG_TX = { client: 'node-postgres', executorCall: 'pgExecutor(pool)', howTo: HOW_TO_TX };

function toRows(result: { rows?: Array<Record<string, any>>; rowCount?: number | null }): SqlRows {
  return { rows: result.rows ?? [], affected: result.rowCount ?? 0 };
}

function config(statement: SqlStatement): { text: string; values: unknown[]; name?: string } {
  const values = statement.params as unknown[];
  return statement.name === undefined
    ? { text: statement.text, values }
    : { name: statement.name, text: statement.text, values };
}

/**
 * `'T'` in a transaction, `'E'` in a failed one, `'I'` outside. pg's `getTransactionStatus()`
 * (8.16+) costs no round trip, but it is the status of the last ReadyForQuery: only trusted while
 * the client is idle (`readyForQuery`; pg reports a failed statement before that message arrives,
 * so just after an error it may still say `'T'`). Otherwise one statement on the client, queued
 * behind whatever it runs: `transaction_timestamp()` is the time of `BEGIN`,
 * `statement_timestamp()` of this statement, and outside a transaction both are the start of this
 * very statement; in a failed transaction it fails with 25P02.
 */
export async function transactionStatus(client: PgClientLike): Promise<'I' | 'T' | 'E'> {
  const reported = client.getTransactionStatus?.();
  if ((client as { readyForQuery?: unknown }).readyForQuery === true) {
    if (reported === 'I' || reported === 'T' || reported === 'E') return reported;
  }
  try {
    const { rows } = await client.query({
      text: 'SELECT transaction_timestamp() <> statement_timestamp() AS open',
      values: [],
    });
    return rows?.[0]?.open === true ? 'T' : 'I';
  } catch (error) {
    if ((error as { code?: unknown }).code === '25P02') return 'E';
    throw error;
  }
}

export class PgConnection implements SqlConnection {
  constructor(readonly client: PgClientLike) {}

  async query(statement: SqlStatement): Promise<SqlRows> {
    return toRows(await this.client.query(config(statement)));
  }
}

/**
 * The SQL store over a node-postgres (`pg`) `Pool`: statements run on its clients (hot ones as
 * named prepared statements, per connection), a caller's transaction is the `PoolClient` on which
 * it ran `BEGIN`. pg has no commit hook: see `CommitWatch.inTransaction` for what replaces it.
 */
class PgExecutor implements SqlExecutor {
  readonly sqlExecutor = true;
  readonly client = 'node-postgres';
  readonly txOption = 'tx';
  readonly dialect = 'postgres';

  constructor(private readonly pool: PgPoolLike) {}

  async query(statement: SqlStatement): Promise<SqlRows> {
    return toRows(await this.pool.query(config(statement)));
  }

  async connection<T>(fn: (connection: SqlConnection) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    try {
      return await fn(new PgConnection(client));
    } finally {
      client.release?.();
    }
  }

  transaction<T>(
    fn: (connection: SqlConnection) => Promise<T>,
    options?: { isolation?: SqlIsolationLevel },
  ): Promise<T> {
    return this.clientTransaction((_client, connection) => fn(connection), options);
  }

  /** `fn` gets the `PoolClient` after `BEGIN`: the app's queries on it join the transaction. */
  async clientTransaction<T>(
    fn: (client: unknown, connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query({
        text: options.isolation ? `BEGIN ISOLATION LEVEL ${options.isolation}` : 'BEGIN',
        values: [],
      });
      try {
        const result = await fn(client, new PgConnection(client));
        await client.query({ text: 'COMMIT', values: [] });
        return result;
      } catch (error) {
        // A connection that cannot roll back is not given back to the pool.
        await client.query({ text: 'ROLLBACK', values: [] }).catch((e: Error) => (broken = e));
        throw error;
      }
    } finally {
      client.release?.(broken);
    }
  }

  ownsClient(value: unknown): boolean {
    return value === this.pool;
  }

  /** A `PoolClient` of this pool inside an open transaction (see `transactionStatus`). */
  async transactionOf(tx: unknown): Promise<CallerTransaction> {
    const t = tx as Record<string, unknown> | null;
    refuseTypeOrmTx(tx, PG_TX);
    if (
      (t as unknown) === this.pool ||
      (typeof t?.connect === 'function' && 'totalCount' in (t ?? {}))
    ) {
      throw new OutboxValidationError(
        'options.tx',
        `is a pg Pool, which has no transaction of its own. ${HOW_TO_TX}`,
      );
    }
    if (typeof t !== 'object' || t === null || typeof t.query !== 'function') {
      throw new OutboxValidationError(
        'options.tx',
        `is not a pg PoolClient, got ${describeValue(tx)}. ${HOW_TO_TX}`,
      );
    }
    const clients = this.pool._clients;
    if (Array.isArray(clients) && !clients.includes(t)) {
      throw new OutboxValidationError(
        'options.tx',
        `is not a client of the pool given to pgExecutor(pool): its transaction may be on another database. ${HOW_TO_TX}`,
      );
    }
    const client = t as unknown as PgClientLike;
    requireOpenTransaction(
      await transactionStatus(client),
      `is not inside an open transaction (no BEGIN), so the event could be committed without your business write. ${HOW_TO_TX}`,
    );
    return { connection: new PgConnection(client), key: client };
  }

  /** A new `pg` Client with the pool's connection options (`pool.options`). */
  listenerConnection(): ListenerConnection {
    const { Client: ownClient, ...options } = this.pool.options ?? {};
    const Client =
      (ownClient as ListenerConnection['Client'] | undefined) ??
      this.pool.Client ??
      (require('pg') as { Client: ListenerConnection['Client'] }).Client;
    return { Client, config: options };
  }
}

/**
 * The executor of the 'sql' store for node-postgres: `store: { type: 'sql', executor:
 * pgExecutor(pool) }`. `pg` is an optional peer: a missing one is named with its install command.
 */
export function pgExecutor(pool: unknown): SqlExecutor {
  assertInstalled('The node-postgres executor (pgExecutor)', ['pg']);
  const p = pool as Partial<PgPoolLike> | null;
  if (
    typeof p !== 'object' ||
    p === null ||
    typeof p.connect !== 'function' ||
    typeof p.query !== 'function' ||
    typeof (p as { release?: unknown }).release === 'function' ||
    // A single pg Client has connect() and query() too, but no pool to hand out connections.
    !('totalCount' in p)
  ) {
    throw new OutboxOptionsError(
      'store.executor',
      `pgExecutor(pool) needs a pg Pool (new Pool({ connectionString }) from 'pg'), got ${describeValue(pool)}`,
    );
  }
  return new PgExecutor(p as PgPoolLike);
}
