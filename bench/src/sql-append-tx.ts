/*
 * sql-append-tx — append cost per business transaction through the executors without TypeORM on
 * PostgreSQL: node-postgres (`pgExecutor(pool)`) and Drizzle (`drizzleExecutor(db)`, node-postgres
 * driver). What an app on that client pays for `outbox.append(…, { tx })` against writing its own
 * outbox row in the same transaction, the shape of append-tx (TypeORM) and prisma-append-tx.
 *
 * C clients (1 or 8), each running transactions back to back. Transactions/s = all clients'
 * transactions / the timed window. Not timed: process start, app bootstrap, schema creation, the
 * warm-up (WARMUP committed transactions).
 *   pg       each client holds one PoolClient for the run: BEGIN; INSERT business row; [outbox
 *            write on that client]; COMMIT (what pgExecutor's README section shows)
 *   drizzle  db.transaction(async (tx) => { INSERT business row through tx.execute; [outbox write
 *            through tx] }) (Drizzle takes a pool client per transaction)
 *
 * Variants (`<client>-<kind>-<clients>`):
 *   business     the business row only
 *   raw          + one plain INSERT into the hand-rolled outbox table, same client, same transaction
 *   ours         + OutboxService.append({ type, key, payload }, { tx }) through the real NestJS app
 *                with store: { type: 'sql', executor } (dispatcher off, one handler: one delivery
 *                per event; wake-ups at their default, on: these executors have no commit hook, so
 *                the append sends its NOTIFY inside the caller's transaction)
 *   ours-nowake  the same with `dispatcher.wakeups: false` (opt-in: BENCH_SQL_APPEND_TX_VARIANTS)
 *
 * Also recorded: statements per transaction (every query sent through `pg` in the timed window,
 * BEGIN and COMMIT included), Node CPU µs per transaction, PostgreSQL backends' CPU µs per
 * transaction (every backend connected to BENCH_PGDATABASE).
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { drizzle, NodePgDatabase } from 'drizzle-orm/node-postgres';
import { Pool, PoolClient } from 'pg';
import {
  args,
  BUSINESS_TABLE,
  countStatements,
  cpuBetween,
  dropOutboxTables,
  emit,
  envInt,
  HANDROLLED_TABLE,
  now,
  openDataSource,
  PG,
  postgresBackendCpu,
  runMain,
  TABLE_PREFIX,
} from './common';
import { orderPayload, resetBusinessTables } from './business';
import { lib } from './lib';
import { createOurApp, EVENT_TYPE, OurApp } from './ours';

const PER_CLIENT: Record<number, number> = {
  1: envInt('BENCH_SQL_TX_N_1', 1_000),
  8: envInt('BENCH_SQL_TX_N_8', 500),
};
const WARMUP = envInt('BENCH_SQL_TX_WARMUP', 200);
const KINDS = ['business', 'raw', 'ours', 'ours-nowake'];

/** The outbox write of a variant, on the client's own transaction object. */
type Write = (tx: unknown, id: string, i: number) => Promise<unknown>;

runMain(async () => {
  const { variant, round } = args();
  const [client, ...rest] = variant.split('-');
  const clients = Number(rest.pop());
  const kind = rest.join('-');
  if (!['pg', 'drizzle'].includes(client) || !KINDS.includes(kind) || !(clients in PER_CLIENT)) {
    throw new Error(`unknown variant ${variant}`);
  }
  const perClient = PER_CLIENT[clients];
  const ds = await openDataSource('postgres');
  await resetBusinessTables(ds);
  await dropOutboxTables(ds);
  // One connection per client plus the outbox's (its listener has a connection of its own).
  const pool = new Pool({
    host: PG.host,
    port: PG.port,
    user: PG.user,
    database: PG.database,
    max: 10,
  });
  const db: NodePgDatabase = drizzle({ client: pool });

  let ours: OurApp | null = null;
  let write: Write = async () => undefined;
  if (kind === 'raw') {
    const text = `INSERT INTO ${HANDROLLED_TABLE} (id, type, event_key, payload) VALUES ($1, $2, $3, $4)`;
    write =
      client === 'pg'
        ? (tx, id, i) =>
            (tx as PoolClient).query(text, [
              randomUUID(),
              EVENT_TYPE,
              id,
              JSON.stringify(orderPayload(id, i)),
            ])
        : (tx, id, i) =>
            (tx as NodePgDatabase).execute(
              sql`INSERT INTO ${sql.raw(HANDROLLED_TABLE)} (id, type, event_key, payload) VALUES (${randomUUID()}, ${EVENT_TYPE}, ${id}, ${JSON.stringify(orderPayload(id, i))})`,
            );
  } else if (kind.startsWith('ours')) {
    const executor = client === 'pg' ? lib.pgExecutor(pool) : lib.drizzleExecutor(db);
    ours = await createOurApp(
      { kind: 'sql', executor },
      kind === 'ours' ? { enabled: false } : { enabled: false, wakeups: false },
    );
    const outbox = ours.outbox;
    write = (tx, id, i) =>
      outbox.append({ type: EVENT_TYPE, key: id, payload: orderPayload(id, i) }, { tx });
  }

  // pg: each client holds its PoolClient for the whole run, connected before any timing.
  const held: PoolClient[] = [];
  if (client === 'pg') for (let k = 0; k < clients; k++) held.push(await pool.connect());
  const transaction = async (k: number, id: string, i: number) => {
    if (client === 'drizzle') {
      await db.transaction(async (tx) => {
        await tx.execute(
          sql`INSERT INTO ${sql.raw(BUSINESS_TABLE)} (id, total) VALUES (${id}, ${i})`,
        );
        await write(tx, id, i);
      });
      return;
    }
    const c = held[k];
    await c.query('BEGIN');
    try {
      await c.query(`INSERT INTO ${BUSINESS_TABLE} (id, total) VALUES ($1, $2)`, [id, i]);
      await write(c, id, i);
      await c.query('COMMIT');
    } catch (error) {
      await c.query('ROLLBACK');
      throw error;
    }
  };
  const runAll = (count: (k: number) => number) =>
    Promise.all(
      Array.from({ length: clients }, async (_, k) => {
        for (let i = 0, n = count(k); i < n; i++) await transaction(k, randomUUID(), i);
      }),
    );

  try {
    await runAll((k) => Math.floor(WARMUP / clients) + (k < WARMUP % clients ? 1 : 0));
    const pg0 = postgresBackendCpu(PG.database);
    const statements = countStatements();
    const cpu0 = process.cpuUsage();
    const t0 = now();
    await runAll(() => perClient);
    const ms = now() - t0;
    const cpu = process.cpuUsage(cpu0);
    statements.stop();
    const pgMs = cpuBetween(pg0, postgresBackendCpu(PG.database));
    const total = perClient * clients;

    const expected = WARMUP + total;
    const count = async (table: string): Promise<number> =>
      (await ds.query(`SELECT COUNT(*)::int AS n FROM ${table}`))[0].n;
    const events = ours
      ? await count(`${TABLE_PREFIX}events`)
      : kind === 'raw'
        ? await count(HANDROLLED_TABLE)
        : 0;
    const wantEvents = kind === 'business' ? 0 : expected;
    if ((await count(BUSINESS_TABLE)) !== expected || events !== wantEvents) {
      throw new Error(`committed rows or events differ from ${expected} / ${wantEvents}`);
    }
    if (ours && (await count(`${TABLE_PREFIX}deliveries`)) !== expected) {
      throw new Error(`expected ${expected} deliveries (one handler per event)`);
    }
    emit({
      scenario: 'sql-append-tx',
      variant,
      round,
      clients,
      n: total,
      ms,
      txPerSec: (total / ms) * 1000,
      statementsPerTx: +(statements.count() / total).toFixed(2),
      cpuUsPerTx: (cpu.user + cpu.system) / total,
      pgCpuUsPerTx: pgMs > 0 ? +((pgMs * 1000) / total).toFixed(1) : undefined,
      settings: { client, clients, perClient, warmup: WARMUP },
    });
  } finally {
    for (const c of held) c.release();
    await ours?.close();
    await pool.end();
    await ds.query(`TRUNCATE ${BUSINESS_TABLE}, ${HANDROLLED_TABLE}`);
    await dropOutboxTables(ds);
    await ds.destroy();
  }
});
