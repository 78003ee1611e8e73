/*
 * Scale-out (issue 14) — throughput of 1, 2 and 4 worker processes on one store.
 *
 * <store>-<workers>: this process appends BENCH_SCALE_N events (no key, in batches of 1 000) from
 * an API-style app (dispatcher off, the handler registered so deliveries are written directly),
 * then forks <workers> worker processes (default dispatcher settings: concurrency 50, batch 100;
 * no-op handler; retention off) that start together on 'go'. Throughput = N / (last handler run − go). Not timed:
 * process start, bootstrap, the append. Each worker reports its count every 50 ms.
 *
 * <store>-<workers>-io: the same with a handler that waits IO_MS (a timer, as for a network call)
 * and concurrency IO_CONCURRENCY per worker, so one worker is bound by its slots, not the store.
 *
 * Stores: PostgreSQL (TypeORM) and Redis. Ratios n workers / 1 worker show where the store (or,
 * on a small machine, the CPU the workers and the server share) becomes the limit.
 */
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import { fork, ChildProcess } from 'node:child_process';
import type { DataSource } from 'typeorm';
import {
  args,
  deleteRedisKeys,
  dropOutboxTables,
  emit,
  envInt,
  hostNow,
  openDataSource,
  REDIS_URL,
  runMain,
} from './common';
import { lib } from './lib';
import { createOurApp, EVENT_TYPE, HANDLER_NAME, OurStore } from './ours';

const N = envInt('BENCH_SCALE_N', 20_000);
const IO_MS = envInt('BENCH_SCALE_IO_MS', 5);
const IO_CONCURRENCY = envInt('BENCH_SCALE_IO_CONCURRENCY', 10);
const TABLE_PREFIX = 'bench_sc_';
const REDIS_PREFIX = 'bench-scale';

type Kind = 'pg' | 'redis';

function storeOf(kind: Kind, dataSource: DataSource | null): OurStore {
  return kind === 'pg'
    ? { kind: 'typeorm', dataSource: dataSource!, tablePrefix: TABLE_PREFIX }
    : { kind: 'redis', prefix: REDIS_PREFIX };
}

async function cleanup(kind: Kind, dataSource: DataSource | null): Promise<void> {
  if (dataSource) await dropOutboxTables(dataSource, TABLE_PREFIX);
  if (kind === 'redis') await deleteRedisKeys(`{${REDIS_PREFIX}}:*`);
}

/** The workers' handler: counts, after waiting IO_MS in the I/O variants (holding its slot). */
@Injectable()
class ScaleHandler {
  static io = false;
  static count = 0;
  static last = 0;

  @lib.OutboxHandler(EVENT_TYPE, { name: HANDLER_NAME })
  async handle(): Promise<void> {
    if (ScaleHandler.io) await new Promise((resolve) => setTimeout(resolve, IO_MS));
    ScaleHandler.count++;
    ScaleHandler.last = hostNow();
  }
}

/** Child: one worker; reports its count every 50 ms, starts its dispatcher on 'go'. */
async function workerMain(kind: Kind, io: boolean): Promise<void> {
  const dataSource = kind === 'pg' ? await openDataSource('postgres') : null;
  ScaleHandler.io = io;
  const store = storeOf(kind, dataSource);
  @Module({
    imports: [
      ScheduleModule.forRoot(),
      lib.OutboxModule.forRoot({
        store: (store.kind === 'typeorm'
          ? { type: 'typeorm', dataSource: store.dataSource, tablePrefix: TABLE_PREFIX }
          : { type: 'redis', url: REDIS_URL, prefix: REDIS_PREFIX }) as never,
        dispatcher: { enabled: false, ...(io ? { concurrency: IO_CONCURRENCY } : {}) },
        retention: { cleanupIntervalMs: 0 },
      }),
    ],
    providers: [ScaleHandler],
  })
  class WorkerModule {}
  const app = await NestFactory.createApplicationContext(WorkerModule, {
    logger: ['error', 'warn'],
  });
  const dispatcher = app.get(lib.OutboxDispatcher);
  const counts = () => ({ count: ScaleHandler.count, last: ScaleHandler.last });
  const report = setInterval(() => process.send!(counts()), 50);
  process.on('message', (message: { op: 'go' | 'exit' }) => {
    if (message.op === 'go') return dispatcher.start();
    clearInterval(report);
    void app.close().then(async () => {
      await dataSource?.destroy();
      process.send!({ ...counts(), final: true, stats: dispatcher.stats() });
      process.exit(0);
    });
  });
  process.send!('ready');
}

async function scale(kind: Kind, workers: number, io: boolean, variant: string, round: number) {
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
    const child = fork(__filename, ['worker', kind, io ? 'io' : 'noop'], {
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
  const go = hostNow();
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
    settings: io
      ? { workers, key: null, handler: `waits ${IO_MS} ms`, concurrency: IO_CONCURRENCY }
      : { workers, key: null, handler: 'no-op', dispatcher: 'defaults' },
  });
}

if (process.argv[2] === 'worker') {
  void workerMain(process.argv[3] as Kind, process.argv[4] === 'io').catch((error) => {
    console.error(error);
    process.exit(1);
  });
} else {
  runMain(async () => {
    const { variant, round } = args();
    const [kind, workers, io] = variant.split('-');
    if (
      (kind !== 'pg' && kind !== 'redis') ||
      !['1', '2', '4'].includes(workers) ||
      ![undefined, 'io'].includes(io)
    ) {
      throw new Error(`unknown variant ${variant} (<pg|redis>-<1|2|4>[-io])`);
    }
    await scale(kind, Number(workers), io === 'io', variant, round);
  });
}
