/*
 * append-driver — the append statement on bare `pg` clients beside the hand-rolled INSERT, no
 * TypeORM and no library code in the timed loop (issue 27, "the append statement alone"):
 * what the statement costs through the driver, so that `append-tx`'s ours ÷ raw splits into the
 * statement's share (this) and the rest (TypeORM's transaction path, the library).
 *
 * C clients (1 and 8; BENCH_APPEND_DRIVER_CLIENTS), each a `pg` Client of its own running
 * BEGIN; INSERT one business row; [the variant's write]; COMMIT back to back. In one process,
 * the variants interleaved in every round (order rotated), each after a warm-up:
 *   raw     the hand-rolled outbox INSERT, unnamed (as TypeORM sends a query with parameters)
 *   raw-n   the same INSERT as a named prepared statement
 *   stmt    the library's one-event append statement (text and prepared name taken from a real
 *           append through the TypeORM store), named, with the values an append binds
 * Transactions/s = all clients' transactions / wall time; Node CPU µs per transaction from
 * process.cpuUsage over the same window. Tables: append-tx's (the business table, the hand-rolled
 * outbox, the library's, created by the library).
 *
 *   cd bench && BENCH_PGDATABASE=<db> BENCH_LIB=lib \
 *     node -r ../node_modules/ts-node/register/transpile-only src/append-driver.ts
 */
import { randomUUID } from 'node:crypto';
import { Client } from 'pg';
import {
  BUSINESS_TABLE,
  dropOutboxTables,
  envInt,
  HANDROLLED_TABLE,
  openDataSource,
  PG,
  runMain,
} from './common';
import { orderPayload, resetBusinessTables } from './business';
import { libRoot } from './lib';
import { appendOneValues, captureAppendStatement, createOurApp, EVENT_TYPE } from './ours';

const ROUNDS = envInt('BENCH_ROUNDS', 5);
const PER_CLIENT: Record<number, number> = {
  1: envInt('BENCH_APPEND_TX_N_1', 2_000),
  8: envInt('BENCH_APPEND_TX_N_8', 600),
};
const WARMUP = envInt('BENCH_APPEND_TX_WARMUP', 200);
const CLIENTS = (process.env.BENCH_APPEND_DRIVER_CLIENTS ?? '1,8').split(',').map(Number);
const VARIANTS = ['raw', 'raw-n', 'stmt'] as const;
type Variant = (typeof VARIANTS)[number];

const HANDROLLED = `INSERT INTO ${HANDROLLED_TABLE} (id, type, event_key, payload) VALUES ($1, $2, $3, $4)`;
const BUSINESS = `INSERT INTO ${BUSINESS_TABLE} (id, total) VALUES ($1, $2)`;

runMain(async () => {
  const ds = await openDataSource('postgres');
  await resetBusinessTables(ds);
  await dropOutboxTables(ds);
  const app = await createOurApp({ kind: 'typeorm', dataSource: ds }, { enabled: false });
  const clients: Client[] = [];
  try {
    const statement = await captureAppendStatement(ds, app);
    const newId: () => string = require(`${libRoot}/ids`).newId;
    const write: Record<Variant, (c: Client, id: string, i: number) => Promise<unknown>> = {
      raw: (c, id, i) =>
        c.query(HANDROLLED, [randomUUID(), EVENT_TYPE, id, JSON.stringify(orderPayload(id, i))]),
      'raw-n': (c, id, i) =>
        c.query({
          name: 'bench_handrolled_insert',
          text: HANDROLLED,
          values: [randomUUID(), EVENT_TYPE, id, JSON.stringify(orderPayload(id, i))],
        }),
      stmt: (c, id, i) =>
        c.query({
          name: statement.name,
          text: statement.text,
          values: appendOneValues(newId, id, i),
        }),
    };
    for (let k = 0; k < Math.max(...CLIENTS); k++) {
      const c = new Client({ host: PG.host, port: PG.port, user: PG.user, database: PG.database });
      await c.connect();
      clients.push(c);
    }
    const transaction = async (c: Client, variant: Variant, i: number) => {
      const id = randomUUID();
      await c.query('BEGIN');
      await c.query(BUSINESS, [id, i]);
      await write[variant](c, id, i);
      await c.query('COMMIT');
    };
    const run = (variant: Variant, n: number, perClient: number) =>
      Promise.all(
        clients.slice(0, n).map(async (c) => {
          for (let i = 0; i < perClient; i++) await transaction(c, variant, i);
        }),
      );

    const results = new Map<string, Array<{ tps: number; cpu: number }>>();
    console.log(`append-driver: ${ROUNDS} rounds, clients ${CLIENTS.join(' and ')}`);
    for (let round = 0; round < ROUNDS; round++) {
      for (const n of CLIENTS) {
        const order = VARIANTS.map((_, k) => VARIANTS[(k + round) % VARIANTS.length]);
        for (const variant of order) {
          await run(variant, n, Math.ceil(WARMUP / n));
          const cpu0 = process.cpuUsage();
          const t0 = performance.now();
          await run(variant, n, PER_CLIENT[n]);
          const seconds = (performance.now() - t0) / 1000;
          const cpu = process.cpuUsage(cpu0);
          const total = n * PER_CLIENT[n];
          const key = `${variant}-${n}`;
          const r = { tps: total / seconds, cpu: (cpu.user + cpu.system) / total };
          (results.get(key) ?? results.set(key, []).get(key)!).push(r);
          console.log(
            `  round ${round + 1} ${key.padEnd(9)} tx/s ${r.tps.toFixed(0)}, Node CPU µs/tx ${r.cpu.toFixed(1)}`,
          );
        }
      }
    }

    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    console.log(
      '\n| variant | median tx/s | median Node CPU µs/tx | per round tx/s |\n|---|---:|---:|---|',
    );
    for (const [key, rs] of results) {
      console.log(
        `| ${key} | ${median(rs.map((r) => r.tps)).toFixed(0)} | ${median(rs.map((r) => r.cpu)).toFixed(1)} | ${rs.map((r) => r.tps.toFixed(0)).join(', ')} |`,
      );
    }
    console.log('\n| ratio (median of per-round) | tx/s | per round |\n|---|---:|---|');
    for (const n of CLIENTS) {
      for (const [a, b] of [
        ['stmt', 'raw'],
        ['stmt', 'raw-n'],
        ['raw-n', 'raw'],
      ]) {
        const x = results.get(`${a}-${n}`)!;
        const y = results.get(`${b}-${n}`)!;
        const ratios = x.map((r, k) => r.tps / y[k].tps);
        console.log(
          `| ${a}-${n} ÷ ${b}-${n} | ${median(ratios).toFixed(2)}× | ${ratios.map((q) => q.toFixed(2)).join(', ')} |`,
        );
      }
    }
  } finally {
    await Promise.all(clients.map((c) => c.end()));
    await app.close();
    await dropOutboxTables(ds);
    await ds.destroy();
  }
});
