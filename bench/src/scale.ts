/*
 * Scale-out (issue 14) — throughput of 1, 2 and 4 worker processes on one store.
 *
 * <store>-<workers>: this process appends BENCH_SCALE_N events (no key, in batches of 1 000) from
 * an API-style app (dispatcher off, the handler registered so deliveries are written directly),
 * then forks <workers> worker processes (default dispatcher settings: concurrency 50, batch 100;
 * no-op handler) that start together on 'go'. Throughput = N / (last handler run − go). Not timed:
 * process start, bootstrap, the append. Each worker reports its count every 50 ms.
 *
 * Stores: PostgreSQL (TypeORM) and Redis. Ratios n workers / 1 worker show where the store (or,
 * on a small machine, the CPU the workers and the server share) becomes the limit.
 */
import { fork, ChildProcess } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import type { DataSource } from 'typeorm';
import {
  args,
  deleteRedisKeys,
  dropOutboxTables,
  emit,
  envInt,
  openDataSource,
  runMain,
} from './common';
import { createOurApp, EVENT_TYPE, OurStore, sink } from './ours';

const N = envInt('BENCH_SCALE_N', 20_000);
const TABLE_PREFIX = 'bench_sc_';
const REDIS_PREFIX = 'bench-scale';

type Kind = 'pg' | 'redis';

const wallNow = () => performance.timeOrigin + performance.now();

function storeOf(kind: Kind, dataSource: DataSource | null): OurStore {
  return kind === 'pg'
    ? { kind: 'typeorm', dataSource: dataSource!, tablePrefix: TABLE_PREFIX }
    : { kind: 'redis', prefix: REDIS_PREFIX };
}

async function cleanup(kind: Kind, dataSource: DataSource | null): Promise<void> {
  if (dataSource) await dropOutboxTables(dataSource, TABLE_PREFIX);
  if (kind === 'redis') await deleteRedisKeys(`{${REDIS_PREFIX}}:*`);
}

/** Child: one worker; counts runs, reports every 50 ms, starts its dispatcher on 'go'. */
async function workerMain(kind: Kind): Promise<void> {
  const dataSource = kind === 'pg' ? await openDataSource('postgres') : null;
  let count = 0;
  let last = 0;
  sink.onEvent = () => {
    count++;
    last = wallNow();
  };
  const worker = await createOurApp(storeOf(kind, dataSource), { enabled: false });
  const report = setInterval(() => process.send!({ count, last }), 50);
  process.on('message', (message: { op: 'go' | 'exit' }) => {
    if (message.op === 'go') return worker.dispatcher.start();
    clearInterval(report);
    void worker.close().then(async () => {
      await dataSource?.destroy();
      process.send!({ count, last, final: true, stats: worker.dispatcher.stats() });
      process.exit(0);
    });
  });
  process.send!('ready');
}

async function scale(kind: Kind, workers: number, variant: string, round: number) {
  const dataSource = kind === 'pg' ? await openDataSource('postgres') : null;
  await cleanup(kind, dataSource);
  const producer = await createOurApp(storeOf(kind, dataSource), { enabled: false });
  for (let from = 0; from < N; from += 1_000) {
    await producer.outbox.append(
      Array.from({ length: Math.min(1_000, N - from) }, (_, i) => ({
        type: EVENT_TYPE,
        payload: { i: from + i },
      })),
    );
  }
  const counts = new Array<number>(workers).fill(0);
  const lasts = new Array<number>(workers).fill(0);
  const children: ChildProcess[] = [];
  const ready: Promise<void>[] = [];
  let finished: () => void = () => undefined;
  const done = new Promise<void>((resolve) => (finished = resolve));
  for (let w = 0; w < workers; w++) {
    const child = fork(__filename, ['worker', kind], {
      execArgv: process.execArgv,
      env: process.env,
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    children.push(child);
    ready.push(
      new Promise((ok) =>
        child.on('message', (m: 'ready' | { count: number; last: number }) => {
          if (m === 'ready') return ok();
          counts[w] = m.count;
          lasts[w] = m.last;
          if (counts.reduce((a, b) => a + b, 0) >= N) finished();
        }),
      ),
    );
  }
  await Promise.all(ready);
  const go = wallNow();
  for (const child of children) child.send({ op: 'go' });
  await done;
  const ms = Math.max(...lasts) - go;
  const stats = await Promise.all(
    children.map(
      (child) =>
        new Promise<{ leaseLost: number; claimed: number }>((ok) => {
          child.on('message', (m: { final?: boolean; stats: never }) => m.final && ok(m.stats));
          child.send({ op: 'exit' });
        }),
    ),
  );
  await producer.close();
  await cleanup(kind, dataSource);
  await dataSource?.destroy();
  emit({
    scenario: 'scale',
    variant,
    round,
    n: N,
    workers,
    eventsPerSec: (N * 1000) / ms,
    perWorker: counts,
    leaseLost: stats.reduce((a, s) => a + s.leaseLost, 0),
    settings: { workers, key: null, handler: 'no-op', dispatcher: 'defaults' },
  });
}

if (process.argv[2] === 'worker') {
  void workerMain(process.argv[3] as Kind).catch((error) => {
    console.error(error);
    process.exit(1);
  });
} else {
  runMain(async () => {
    const { variant, round } = args();
    const [kind, workers] = variant.split('-');
    if ((kind !== 'pg' && kind !== 'redis') || !['1', '2', '4'].includes(workers)) {
      throw new Error(`unknown variant ${variant} (pg-1|pg-2|pg-4|redis-1|redis-2|redis-4)`);
    }
    await scale(kind, Number(workers), variant, round);
  });
}
