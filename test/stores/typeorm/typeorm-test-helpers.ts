import { randomBytes, randomUUID } from 'node:crypto';
import { DataSource, DataSourceOptions, QueryRunner } from 'typeorm';
import { ServiceName, SERVICES } from '../../support/services';
import { ensureOutboxSchema, TypeOrmOutboxStore } from '../../../lib/stores/typeorm/internal';
import { createDialect } from '../../../lib/stores/typeorm/dialects';
import {
  ClaimedDelivery,
  HandlerSubscription,
} from '../../../lib/interfaces/outbox-store.interface';

export type TestDialect = 'postgres' | 'mariadb' | 'sqlite';

/** Service each dialect needs (SQLite runs in-process). */
export const SERVICE_OF: Record<Exclude<TestDialect, 'sqlite'>, ServiceName> = {
  postgres: 'postgres',
  mariadb: 'mariadb',
};

export function dataSourceOptions(
  dialect: TestDialect,
  extra: Record<string, unknown> = {},
): DataSourceOptions {
  switch (dialect) {
    case 'postgres':
      return {
        type: 'postgres',
        host: SERVICES.postgres.host,
        port: SERVICES.postgres.port,
        username: process.env.PGUSER ?? 'postgres',
        password: process.env.PGPASSWORD,
        database: process.env.PGDATABASE ?? 'test',
        extra,
      };
    case 'mariadb':
      return {
        type: 'mariadb',
        host: SERVICES.mariadb.host,
        port: SERVICES.mariadb.port,
        username: process.env.MYSQL_USER ?? 'root',
        password: process.env.MYSQL_PASSWORD ?? '',
        database: process.env.MYSQL_DATABASE ?? 'test',
        extra,
      };
    case 'sqlite':
      return { type: 'better-sqlite3', database: ':memory:' };
  }
}

export async function openDataSource(
  dialect: TestDialect,
  extra: Record<string, unknown> = {},
): Promise<DataSource> {
  return new DataSource(dataSourceOptions(dialect, extra)).initialize();
}

/** A table prefix no other test file or run uses, so files can run in parallel on one server. */
export function uniquePrefix(tag: string): string {
  return `t_${tag}_${randomBytes(4).toString('hex')}_`;
}

/** Creates the tables for `prefix` and returns a store plus helpers to empty and drop them. */
export async function storeFor(dataSource: DataSource, prefix: string) {
  await ensureOutboxSchema(dataSource, { tablePrefix: prefix });
  const store = new TypeOrmOutboxStore(dataSource, { tablePrefix: prefix });
  const dialect = createDialect(dataSource, { tablePrefix: prefix });
  return {
    store,
    async empty(): Promise<void> {
      await dataSource.query(`DELETE FROM ${dialect.tables.deliveries.text}`);
      await dataSource.query(`DELETE FROM ${dialect.tables.deadLetters.text}`);
      await dataSource.query(`DELETE FROM ${dialect.tables.events.text}`);
    },
    async drop(): Promise<void> {
      for (const ddl of dialect.dropSchema()) await dataSource.query(ddl);
    },
    tables: dialect.tables,
  };
}

/**
 * A DataSource of `dialect` and a store on fresh tables for the enclosing `describe`: opened in
 * `beforeAll`, dropped and closed in `afterAll`. Read its fields inside tests.
 */
export function useTables(dialect: TestDialect, tag: string) {
  const t = {} as {
    dataSource: DataSource;
    tables: Awaited<ReturnType<typeof storeFor>>;
  };
  beforeAll(async () => {
    t.dataSource = await openDataSource(dialect);
    t.tables = await storeFor(t.dataSource, uniquePrefix(`${tag}${dialect.slice(0, 2)}`));
  });
  afterAll(async () => {
    await t.tables?.drop();
    await t.dataSource?.destroy();
  });
  return t;
}

/**
 * Makes a MariaDB store claim the way MySQL 8 does (a READ COMMITTED transaction: window, locking
 * select, UPDATE, read back), as it does on a server logging statements, so that path is tested
 * on the MariaDB server the suite has. A no-op on other dialects.
 */
export function claimInTransaction(store: TypeOrmOutboxStore): TypeOrmOutboxStore {
  const dialect = (store as unknown as { ctx: { dialect: { oneStatementClaim?: boolean } } }).ctx
    .dialect;
  if ('oneStatementClaim' in dialect) dialect.oneStatementClaim = false;
  return store;
}

/**
 * Runs `body` while every statement sent through the DataSource's query runners is shown to
 * `after` once it has returned (its text, parameters and the caller's wait), then restores them.
 * Tests record or EXPLAIN what the store sends, or act between two of its statements.
 */
export async function watchStatements<T>(
  ds: DataSource,
  after: (text: string, params: unknown[]) => void | Promise<void>,
  body: () => Promise<T>,
): Promise<T> {
  const create = ds.createQueryRunner.bind(ds);
  ds.createQueryRunner = (mode?: 'master' | 'slave'): QueryRunner => {
    const runner = create(mode);
    const query = runner.query.bind(runner);
    runner.query = (async (text: string, params?: unknown[], structured?: boolean) => {
      const result = await query(text, params, structured as true);
      await after(text, params ?? []);
      return result;
    }) as QueryRunner['query'];
    return runner;
  };
  try {
    return await body();
  } finally {
    ds.createQueryRunner = create;
  }
}

/**
 * Fresh PostgreSQL tables and a store on them that sends unprepared statements, through TypeORM's
 * query runner, so a test can record and EXPLAIN them (the prepared path sends the same text).
 * `close` drops the tables and closes the DataSource.
 */
export async function openUnpreparedPgStore(tag: string) {
  const ds = await openDataSource('postgres');
  const h = await storeFor(ds, uniquePrefix(tag));
  const store = new TypeOrmOutboxStore(ds, {
    tablePrefix: h.tables.prefix,
    preparedStatements: false,
  });
  return {
    ds,
    h,
    store,
    async close(): Promise<void> {
      await h.drop();
      await ds.destroy();
    },
  };
}

/** An event for `handlers`, its payload numbered `i`. */
export function testEvent(type: string, key: string | null, handlers: string[], i: number) {
  return {
    id: randomUUID(),
    type,
    key,
    payload: { i },
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers,
  };
}

/** A node of PostgreSQL's `EXPLAIN (FORMAT JSON)` plan, with the fields the tests read. */
export interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  Alias?: string;
  'Index Name'?: string;
  'Shared Hit Blocks'?: number;
  'Shared Read Blocks'?: number;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}

/** The plan's nodes, the root first. */
export function planNodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(planNodes)];
}

/**
 * The claim statement `handlers` send (sent for real: `claimed` is what it took), then EXPLAINed
 * with ANALYZE as the server's generic plan of it — the plan the server may settle on after five
 * executions (PostgreSQL 15 has no EXPLAIN (GENERIC_PLAN)): parameters unknown to the planner.
 * Rolled back.
 */
export async function genericClaimPlan(
  ds: DataSource,
  store: TypeOrmOutboxStore,
  handlers: HandlerSubscription[],
  limit: number,
  options: { buffers?: boolean } = {},
): Promise<{ claimed: ClaimedDelivery[]; plan: PlanNode[] }> {
  const sent: Array<{ text: string; params: unknown[] }> = [];
  const claimed = await watchStatements(
    ds,
    (text, params) => {
      if (/lease_token = /.test(text) && /SKIP LOCKED/.test(text)) sent.push({ text, params });
    },
    () => store.claim({ workerId: 'w', handlers, limit, leaseMs: 60_000 }),
  );
  if (sent.length !== 1) throw new Error(`expected one claim statement, saw ${sent.length}`);
  const literal = (v: unknown) =>
    typeof v === 'number' ? String(v) : `'${String(v).replace(/'/g, "''")}'`;
  const runner = ds.createQueryRunner();
  try {
    await runner.startTransaction();
    await runner.query(`SET LOCAL plan_cache_mode = force_generic_plan`);
    await runner.query(`PREPARE generic_claim AS ${sent[0].text}`);
    const [row] = await runner.query(
      `EXPLAIN (ANALYZE, ${options.buffers ? 'BUFFERS, ' : ''}FORMAT JSON) EXECUTE generic_claim(${sent[0].params.map(literal).join(', ')})`,
    );
    return { claimed, plan: planNodes((row['QUERY PLAN'] as Array<{ Plan: PlanNode }>)[0].Plan) };
  } finally {
    await runner.rollbackTransaction();
    await runner.query('DEALLOCATE ALL');
    await runner.release();
  }
}
