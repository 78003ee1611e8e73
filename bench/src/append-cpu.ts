/*
 * append-cpu — the library's own Node CPU per `outbox.append(event, { manager })` in a caller's
 * TypeORM transaction, without the server: the real NestJS app and store (PostgreSQL DataSource,
 * one handler, wake-ups at the library default), and one open transaction whose `pg` client
 * answers the append's prepared statement at once with the row PostgreSQL would return (every
 * other statement goes to the server). What remains is what append-tx's `ours` pays in Node above
 * `stmt` (the same statement sent straight to the client): validation, ids, JSON, the executor,
 * the plan runner, the statement's values, `pg`'s own handling of the named query config.
 *
 *   node -r ../node_modules/ts-node/register/transpile-only src/append-cpu.ts [variant] [round]
 *   BENCH_APPEND_CPU_N=20000 (timed appends), BENCH_APPEND_CPU_WARMUP=5000; `--cpu-prof` with
 *   BENCH_APPEND_CPU_WINDOW=1 prints the timed window for cpu-profile.ts.
 *
 * Variants: `ours` (append through the service), `stmt` (the client call alone with the values
 * an append binds: the floor the stubbed client leaves).
 */
import { randomUUID } from 'node:crypto';
import { args, dropOutboxTables, emit, envInt, now, openDataSource, runMain } from './common';
import { orderPayload } from './business';
import { libRoot } from './lib';
import { appendOneValues, createOurApp, EVENT_TYPE } from './ours';

const N = envInt('BENCH_APPEND_CPU_N', 20_000);
const WARMUP = envInt('BENCH_APPEND_CPU_WARMUP', 5_000);

interface PgQueryConfig {
  name?: string;
  text: string;
  values?: unknown[];
}
type PgQuery = (config: PgQueryConfig | string, values?: unknown[]) => Promise<unknown>;

runMain(async () => {
  const { variant, round } = args();
  if (variant !== 'ours' && variant !== 'stmt') throw new Error(`unknown variant ${variant}`);
  const ds = await openDataSource('postgres');
  await dropOutboxTables(ds);
  const ours = await createOurApp({ kind: 'typeorm', dataSource: ds }, { enabled: false });
  const qr = ds.createQueryRunner();
  await qr.startTransaction();
  try {
    const client = (await qr.connect()) as { query: PgQuery };
    const real = client.query.bind(client);
    let seq = 0;
    // The append's answer, as pg would parse it; the values are read like a real result's.
    client.query = ((config: PgQueryConfig | string, values?: unknown[]) => {
      if (typeof config === 'object' && config.name !== undefined) {
        const id = config.values?.[0];
        return Promise.resolve({
          rows: [{ id, seq: String(++seq), available_at: new Date().toISOString() }],
          rowCount: 1,
        });
      }
      return real(config, values);
    }) as PgQuery;
    const newId: () => string = require(`${libRoot}/ids`).newId;
    const outbox = ours.outbox;
    const one =
      variant === 'ours'
        ? (i: number) => {
            const id = randomUUID();
            return outbox.append(
              { type: EVENT_TYPE, key: id, payload: orderPayload(id, i) },
              { manager: qr.manager },
            );
          }
        : (i: number) => {
            const id = randomUUID();
            return client.query({
              name: 'append-cpu',
              text: 'stub',
              values: appendOneValues(newId, id, i),
            });
          };
    for (let i = 0; i < WARMUP; i++) await one(i);
    const mono0 = process.hrtime.bigint();
    const cpu0 = process.cpuUsage();
    const t0 = now();
    for (let i = 0; i < N; i++) await one(i);
    const ms = now() - t0;
    const cpu = process.cpuUsage(cpu0);
    if (process.env.BENCH_APPEND_CPU_WINDOW === '1') {
      process.stderr.write(`window ${mono0 / 1000n}:${process.hrtime.bigint() / 1000n}\n`);
    }
    emit({
      scenario: 'append-cpu',
      variant,
      round,
      n: N,
      ms,
      usPerAppend: (ms * 1000) / N,
      cpuUsPerAppend: (cpu.user + cpu.system) / N,
    });
    client.query = real as PgQuery;
    if (process.env.BENCH_APPEND_CPU_HEAP) {
      (global as { gc?: () => void }).gc?.();
      require('node:v8').writeHeapSnapshot(process.env.BENCH_APPEND_CPU_HEAP);
    }
  } finally {
    await qr.rollbackTransaction();
    await qr.release();
    await ours.close();
    await dropOutboxTables(ds);
    await ds.destroy();
  }
});
