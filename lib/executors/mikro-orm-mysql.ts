import { assertInstalled } from '../optional-peers';
import {
  EntityManagerLike,
  KnexClientLike,
  knexTransactionOf,
  MIKRO_TX,
  ownsMikroClient,
} from './mikro-orm-entity-manager';
import { Mysql2Connection, requireMysqlOpenTransaction } from './mysql2-executor';
import {
  CallerTransaction,
  serverFlavorOnce,
  SqlConnection,
  SqlExecutor,
  SqlIsolationLevel,
  SqlStatement,
} from './sql-executor';

/**
 * A connection of the `mariadb` connector's callback API (`mariadb/callback`), which
 * `@mikro-orm/mariadb` 6 opens through knex: not mysql2, but the same shapes where the store looks
 * (rows as objects, `affectedRows` on writes, errors with `errno` and `code`).
 */
interface MariadbConnection {
  query(
    options: { sql: string } & Record<string, unknown>,
    params: unknown[],
    callback: (error: Error | null, result: unknown) => void,
  ): unknown;
  /** Updated from every OK packet: its server status flags. */
  info?: { status?: number | null } | null;
  destroy(): void;
}

/**
 * Read options for every statement, over the ones MikroORM opens its connections with
 * (`dateStrings`, `supportBigNumbers`, …, in `MySqlConnection.getConnectionOptions()`), so rows
 * come back as mysql2Executor gives them on MariaDB: dates as `Date`, BIGINT as number, DECIMAL as
 * string, JSON columns as their text (the connector's defaults parse them and return BigInt).
 */
const AS_MYSQL2 = {
  dateStrings: false,
  bigIntAsNumber: true,
  supportBigNumbers: false,
  bigNumberStrings: false,
  decimalAsNumber: false,
  insertIdAsNumber: true,
  autoJsonMap: false,
  jsonStrings: true,
  checkDuplicate: false,
  typeCast: undefined,
} as const;

/**
 * Statements on a `mariadb` connection through the mysql2 executor's connection (`query`,
 * `queryBackToBack`: the connector pipelines a command the moment it is queued), with
 * `AS_MYSQL2` read options.
 */
function mysqlConnection(raw: MariadbConnection): Mysql2Connection {
  return new Mysql2Connection({
    query: (text, params, callback) => raw.query({ sql: text, ...AS_MYSQL2 }, params, callback),
  });
}

/** The server status flags of the OK packet of a no-op statement on `raw`. */
async function serverStatus(raw: MariadbConnection): Promise<number | undefined> {
  await mysqlConnection(raw).query({ text: 'DO 0', params: [] });
  return raw.info?.status ?? undefined;
}

/**
 * The SQL store over MikroORM 6 on MariaDB (`@mikro-orm/mariadb`). As on PostgreSQL, statements
 * do not go through `em.execute()`: they run on the connections of MikroORM's knex pool (the
 * `mariadb` connector's), read as mysql2Executor reads them (see `AS_MYSQL2`). A caller's
 * transaction is the forked EntityManager of `em.transactional(async (em) => …)`, whose knex
 * transaction hands out the one connection it runs on; the server's status flags say whether it
 * is still open, as for mysql2. No commit hook: see `CommitWatch.inTransaction`.
 */
class MikroOrmMysqlExecutor implements SqlExecutor {
  readonly sqlExecutor = true;
  readonly client = 'MikroORM';
  readonly txOption = 'tx';
  readonly dialect = 'mysql';

  constructor(
    private readonly orm: unknown,
    private readonly em: EntityManagerLike,
  ) {}

  private get knexClient(): KnexClientLike<MariadbConnection> {
    return this.em.getConnection('write').getKnex().client as KnexClientLike<MariadbConnection>;
  }

  /** From `VERSION()`, once (see `serverFlavorOnce`). */
  readonly serverFlavor = serverFlavorOnce((statement) => this.query(statement));

  query(statement: SqlStatement) {
    return this.connection((connection) => connection.query(statement));
  }

  async connection<T>(fn: (connection: SqlConnection) => Promise<T>): Promise<T> {
    const knex = this.knexClient;
    const raw = await knex.acquireConnection();
    try {
      return await fn(mysqlConnection(raw));
    } finally {
      await knex.releaseConnection(raw);
    }
  }

  async transaction<T>(
    fn: (connection: SqlConnection) => Promise<T>,
    options: { isolation?: SqlIsolationLevel } = {},
  ): Promise<T> {
    const knex = this.knexClient;
    const raw = await knex.acquireConnection();
    const connection = mysqlConnection(raw);
    const run = (text: string) => connection.query({ text, params: [] });
    try {
      try {
        // Without a scope, SET TRANSACTION sets the next transaction's isolation only: a
        // connection that could not start that transaction is not given back with it pending.
        if (options.isolation) await run(`SET TRANSACTION ISOLATION LEVEL ${options.isolation}`);
        await run('START TRANSACTION');
      } catch (error) {
        raw.destroy();
        throw error;
      }
      try {
        const result = await fn(connection);
        await run('COMMIT');
        return result;
      } catch (error) {
        // A connection that cannot roll back is destroyed: knex's pool drops an invalid one.
        await run('ROLLBACK').catch(() => raw.destroy());
        throw error;
      }
    } finally {
      await knex.releaseConnection(raw);
    }
  }

  /**
   * A new transaction through MikroORM (`em.transactional`, always a new one: `requires_new`);
   * `tx` is its forked EntityManager.
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

  ownsClient(value: unknown): boolean {
    return ownsMikroClient(this.orm, this.em, value);
  }

  /** A MikroORM EntityManager of this database inside its open transaction. */
  async transactionOf(tx: unknown): Promise<CallerTransaction> {
    const ctx = knexTransactionOf<MariadbConnection>(tx, this.em, '@mikro-orm/mariadb');
    const raw = await ctx.client.acquireConnection();
    requireMysqlOpenTransaction(await serverStatus(raw), MIKRO_TX.howTo);
    return { connection: mysqlConnection(raw), key: ctx };
  }
}

/** `mikroOrmExecutor(orm)` for an EntityManager whose knex client is the `mariadb` one. */
export function mikroOrmMysqlExecutor(orm: unknown, em: EntityManagerLike): SqlExecutor {
  assertInstalled('The MikroORM executor (mikroOrmExecutor)', [
    '@mikro-orm/core',
    '@mikro-orm/mariadb',
  ]);
  return new MikroOrmMysqlExecutor(orm, em);
}
