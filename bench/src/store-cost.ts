/*
 * Store cost (a diagnostic, not a timed comparison): the Node CPU and the statements one TypeORM
 * store spends per claimed and per acknowledged delivery, with no dispatcher and no concurrency,
 * so the numbers move with the store's code and not with the machine's load.
 * N events (no key, the dispatch scenario's payload) are appended first; then one loop claims
 * `limit` deliveries and acknowledges them with `ackMany`, until nothing is left.
 *   node -r ../node_modules/ts-node/register/transpile-only src/store-cost.ts mariadb|postgres
 * Prints one BENCH_RESULT line: µs of Node CPU (process.cpuUsage) and wall ms per claimed
 * delivery, per acknowledged delivery, and statements per claim and per ack call.
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import {
  dropOutboxTables,
  emit,
  envInt,
  openDataSource,
  orderEvents,
  runMain,
  TABLE_PREFIX,
} from './common';
import { stores } from './lib';

const N = envInt('BENCH_STORE_COST_N', 20_000);
const LIMIT = envInt('BENCH_STORE_COST_LIMIT', 100);
const HANDLER = { name: 'bench.noop', types: ['order.placed'] };

const cpu = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

runMain(async () => {
  const kind = process.argv[2] === 'postgres' ? 'postgres' : 'mariadb';
  const ds = await openDataSource(kind);
  await dropOutboxTables(ds);
  try {
    const store = new stores.TypeOrmOutboxStore(ds, {
      tablePrefix: TABLE_PREFIX,
      ensureSchema: true,
    });
    await store.init();
    for (let i = 0; i < N; i += 500) {
      await store.append(orderEvents(HANDLER, i, Math.min(500, N - i)));
    }
    // Count what reaches the driver from here on (the dialect's one way to the database).
    const dialect = (store as any).ctx.dialect;
    const exec = dialect.exec.bind(dialect);
    let statements = 0;
    // Wall ms per kind of statement (its first words), to see which one the time goes to.
    const byKind = new Map<string, { n: number; ms: number }>();
    dialect.exec = async (runner: unknown, stmt: { text: string }) => {
      statements++;
      const kind = stmt.text.replace(/\s+/g, ' ').slice(0, 40);
      const t = performance.now();
      try {
        return await exec(runner, stmt);
      } finally {
        const k = byKind.get(kind) ?? { n: 0, ms: 0 };
        k.n++;
        k.ms += performance.now() - t;
        byKind.set(kind, k);
      }
    };
    const workerId = randomUUID();
    let claimed = 0;
    let acked = 0;
    let claims = 0;
    let acks = 0;
    let claimStatements = 0;
    let ackStatements = 0;
    let claimCpu = 0;
    let ackCpu = 0;
    let claimMs = 0;
    let ackMs = 0;
    for (;;) {
      let c0 = cpu();
      let t0 = performance.now();
      let s0 = statements;
      const got = await store.claim({
        workerId,
        handlers: [HANDLER],
        limit: LIMIT,
        leaseMs: 30_000,
      });
      claimCpu += cpu() - c0;
      claimMs += performance.now() - t0;
      claimStatements += statements - s0;
      claims++;
      if (got.length === 0) break;
      claimed += got.length;
      c0 = cpu();
      t0 = performance.now();
      s0 = statements;
      const ids = await store.ackMany!(got.map((d) => d.lease));
      ackCpu += cpu() - c0;
      ackMs += performance.now() - t0;
      ackStatements += statements - s0;
      acks++;
      acked += ids.length;
    }
    if (claimed !== N || acked !== N) throw new Error(`claimed ${claimed}, acked ${acked} of ${N}`);
    emit({
      scenario: 'store-cost',
      variant: kind,
      n: N,
      limit: LIMIT,
      claimCpuUsPerEvent: +(claimCpu / N).toFixed(1),
      ackCpuUsPerEvent: +(ackCpu / N).toFixed(1),
      claimMsPerCall: +(claimMs / claims).toFixed(2),
      ackMsPerCall: +(ackMs / acks).toFixed(2),
      statementsPerClaim: +(claimStatements / claims).toFixed(2),
      statementsPerAck: +(ackStatements / acks).toFixed(2),
      msPerStatement: Object.fromEntries(
        [...byKind].map(([k, v]) => [k, { n: v.n, ms: +(v.ms / v.n).toFixed(2) }]),
      ),
    });
  } finally {
    await dropOutboxTables(ds);
    await ds.destroy();
  }
});
