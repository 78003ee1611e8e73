import { dirname } from 'node:path';
import { requireOpenTransaction } from './caller-transaction-checks';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { assertInstalled } from '../optional-peers';
import {
  ENDED,
  EntityManagerLike,
  isEntityManager,
  isOrm,
  KnexClientLike,
  knexClientOf,
  knexTransactionOf,
  ownsMikroClient,
} from './mikro-orm-entity-manager';
import { mikroOrmMysqlExecutor } from './mikro-orm-mysql';
import { PgClientLike, PgConnection, transactionStatus } from './pg-executor';
import {
  CallerTransaction,
  describeValue,
  ListenerConnection,
  SqlConnection,
  SqlExecutor,
  SqlIsolationLevel,
  SqlStatement,
} from './sql-executor';

/**
 * The `pg` module MikroORM's PostgreSQL driver loads (resolved from `@mikro-orm/postgresql`, which
 * depends on it, so an app need not install `pg` itself).
 */
function pgModule(): {
  Client: ListenerConnection['Client'];
  types: unknown;
} {
  const driverDir = dirname(require.resolve('@mikro-orm/postgresql'));
  return require(require.resolve('pg', { paths: [driverDir] }));
}

/**
 * A pooled `pg` client of MikroORM, read as plain node-postgres reads. MikroORM opens its
 * connections with type parsers that keep dates and timestamps as strings (`types` in
 * `PostgreSqlConnection.getConnectionOptions()`); the store is written against pg's defaults, so
 * each statement carries pg's default `types` (a query's own `types` wins over the client's).
 * Everything else (named prepared statements, `rowCount`, the driver's errors with their SQLSTATE
 * `code`) is pg's own: MikroORM's `DriverException` wrapping is not in this path.
 */
class DefaultTypesClient implements PgClientLike {
  constructor(
    readonly client: PgClientLike,
    private readonly types: unknown,
  ) {}

  query(config: { text: string; values: unknown[]; name?: string }) {
    return this.client.query({ ...config, types: this.types } as typeof config);
  }
}

/**
 * The SQL store over MikroORM 6 on PostgreSQL (`@mikro-orm/postgresql`). Statements do not go
 * through `em.execute()` (knex rewrites `?` placeholders, and MikroORM's results keep timestamps as
 * strings): they run on the `pg` clients of MikroORM's own knex pool, with pg's default parsing
 * (see `DefaultTypesClient`). A caller's transaction is the forked `EntityManager` of
 * `em.transactional(async (em) => …)` (or after `em.begin()`): its transaction context is a knex
 * `Transaction` bound to one pooled client, where the outbox's statements run too, so they commit
 * with what MikroORM flushes at the end of that transaction. No commit hook is used: wake-ups are
 * a NOTIFY inside the caller's transaction, as for pg.
 */
class MikroOrmExecutor implements SqlExecutor {
  readonly sqlExecutor = true;
  readonly client = 'MikroORM';
  readonly txOption = 'tx';
  readonly dialect = 'postgres';
  private readonly types: unknown;

  constructor(
    private readonly orm: unknown,
    private readonly em: EntityManagerLike,
  ) {
    this.types = pgModule().types;
  }

  private get knexClient(): KnexClientLike<PgClientLike> {
    return this.em.getConnection('write').getKnex().client as KnexClientLike<PgClientLike>;
  }

  query(statement: SqlStatement) {
    return this.connection((connection) => connection.query(statement));
  }

  async connection<T>(fn: (connection: SqlConnection) => Promise<T>): Promise<T> {
    const knex = this.knexClient;
    const client = await knex.acquireConnection();
    try {
      return await fn(new PgConnection(new DefaultTypesClient(client, this.types)));
    } finally {
      await knex.releaseConnection(client);
    }
  }

  async transaction<T>(
    fn: (connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    const knex = this.knexClient;
    const client = await knex.acquireConnection();
    const connection = new PgConnection(new DefaultTypesClient(client, this.types));
    const run = (text: string) => connection.query({ text, params: [] });
    try {
      await run(options.isolation ? `BEGIN ISOLATION LEVEL ${options.isolation}` : 'BEGIN');
      try {
        const result = await fn(connection);
        await run('COMMIT');
        return result;
      } catch (error) {
        // A connection that cannot roll back is closed: knex's pool drops an ended connection.
        await run('ROLLBACK').catch(() =>
          (client as { end?(): Promise<void> }).end?.().catch(() => undefined),
        );
        throw error;
      }
    } finally {
      await knex.releaseConnection(client);
    }
  }

  /**
   * A new transaction through MikroORM (`em.transactional`, always a new one: `requires_new`, not
   * a savepoint of a transaction the calling context may hold); `tx` is its forked EntityManager.
   */
  clientTransaction<T>(
    fn: (tx: unknown, connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    return this.em.transactional(
      async (em) => {
        const { connection } = await this.transactionOf(em);
        return fn(em, connection);
      },
      {
        propagation: 'requires_new',
        ...(options.isolation ? { isolationLevel: options.isolation.toLowerCase() } : {}),
      },
    );
  }

  /** The MikroORM instance given to the executor, or an EntityManager of its database. */
  ownsClient(value: unknown): boolean {
    return ownsMikroClient(this.orm, this.em, value);
  }

  /** A MikroORM EntityManager of this database inside its open transaction. */
  async transactionOf(tx: unknown): Promise<CallerTransaction> {
    const ctx = knexTransactionOf<PgClientLike>(tx, this.em, '@mikro-orm/postgresql');
    // A knex transaction's client hands out the one connection the transaction runs on.
    const client = await ctx.client.acquireConnection();
    requireOpenTransaction(await transactionStatus(client), ENDED);
    return {
      connection: new PgConnection(new DefaultTypesClient(client, this.types)),
      key: ctx,
    };
  }

  /**
   * A new `pg` Client with the options MikroORM opens its connections with (its date parsers
   * dropped: the listener reads none); `null` when knex gets them from a function.
   */
  listenerConnection(): ListenerConnection | null {
    const settings = this.knexClient.connectionSettings;
    if (typeof settings !== 'object' || settings === null) return null;
    const { types: _types, ...config } = settings as Record<string, unknown>;
    return { Client: pgModule().Client, config };
  }
}

/**
 * The executor of the 'sql' store for MikroORM 6: `store: { type: 'sql', executor:
 * mikroOrmExecutor(orm) }` (the `MikroORM` instance, or its `orm.em`), and `append(events, { tx:
 * em })` with the EntityManager of `em.transactional(async (em) => …)`. PostgreSQL
 * (`@mikro-orm/postgresql`) here; MariaDB (`@mikro-orm/mariadb`) in
 * mikro-orm-mysql.ts. `@mikro-orm/core` and the driver are optional peers: a missing one is named
 * with its install command.
 */
export function mikroOrmExecutor(ormOrEm: unknown): SqlExecutor {
  const em = isOrm(ormOrEm) ? ormOrEm.em : ormOrEm;
  const knex = isEntityManager(em) ? knexClientOf(em) : undefined;
  if (knex?.driverName === 'mariadb')
    return mikroOrmMysqlExecutor(ormOrEm, em as EntityManagerLike);
  assertInstalled('The MikroORM executor (mikroOrmExecutor)', [
    '@mikro-orm/core',
    '@mikro-orm/postgresql',
  ]);
  const HOW =
    "mikroOrmExecutor(orm) needs a MikroORM instance (await MikroORM.init({ driver: PostgreSqlDriver, … }) from '@mikro-orm/postgresql', or MariaDbDriver from '@mikro-orm/mariadb') or its orm.em";
  if (!isEntityManager(em)) {
    throw new OutboxOptionsError('store.executor', `${HOW}, got ${describeValue(ormOrEm)}`);
  }
  if (knex?.driverName !== 'pg') {
    throw new OutboxOptionsError(
      'store.executor',
      `${HOW}; mikroOrmExecutor supports the PostgreSQL and MariaDB drivers (@mikro-orm/postgresql, @mikro-orm/mariadb), got an EntityManager over ${describeValue(em.getDriver())}`,
    );
  }
  return new MikroOrmExecutor(ormOrEm, em);
}
