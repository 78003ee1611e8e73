/*
 * Wake-ups (issue 10) — cross-process latency and the producer's cost.
 *
 * latency-<store>-<on|off>: this process is the worker (default dispatcher settings, pollInterval
 * 500 ms, `wakeups` on or off); a child process is the producer (an API process: dispatcher off,
 * NO handler for the type, so its events are unexpanded placeholders, the usual split). The
 * producer appends RATE events/s for SECONDS seconds (one event per append, on a fixed schedule),
 * then a burst of BURST events from 8 concurrent appenders. Latency = handler start in the worker
 * − the moment append() resolved in the producer (committed), both on the host's monotonic clock
 * (hostNow: process.hrtime, the same in both processes of the machine).
 * Not timed: process start, bootstrap, 5 warm-up events.
 *
 * append-<store>-<on|off>-<clients>: this process appends APPEND_N events, one per append (its own
 * transaction), from 1 or 8 concurrent clients; dispatcher off, `wakeups` on or off. With
 * wake-ups on, a subscriber in the same process counts the signals that arrive (what one
 * listening worker would receive).
 *
 * Stores: PostgreSQL (TypeORM) and Redis.
 */
import { fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { performance } from 'node:perf_hooks';
import type { DataSource } from 'typeorm';
import {
  args,
  deleteRedisKeys,
  dropOutboxTables,
  emit,
  envInt,
  hostNow,
  openDataSource,
  quantile,
  REDIS_URL,
  runMain,
  sleep,
  waitFor,
  WAKE_REDIS_PREFIX,
  WAKE_TABLE_PREFIX,
} from './common';
import { lib } from './lib';
import { createOurApp, EVENT_TYPE, sink } from './ours';

const RATE = envInt('BENCH_WAKE_RATE', 50);
const SECONDS = envInt('BENCH_WAKE_SECONDS', 10);
const BURST = envInt('BENCH_WAKE_BURST', 1_000);
const APPEND_N = envInt('BENCH_WAKE_APPEND_N', 5_000);
const WARMUP = 5;

type Kind = 'pg' | 'redis';

function storeOptions(kind: Kind, dataSource: DataSource | null): unknown {
  return kind === 'pg'
    ? { type: 'typeorm', dataSource, tablePrefix: WAKE_TABLE_PREFIX, ensureSchema: true }
    : { type: 'redis', url: REDIS_URL, prefix: WAKE_REDIS_PREFIX };
}

/** An API-style app: appends, no handlers, no dispatcher. */
async function createProducer(kind: Kind, dataSource: DataSource | null, wakeups: boolean) {
  @Module({
    imports: [
      lib.OutboxModule.forRoot({
        store: storeOptions(kind, dataSource) as never,
        dispatcher: { enabled: false, wakeups },
      }),
    ],
  })
  class ProducerModule {}
  const app = await NestFactory.createApplicationContext(ProducerModule, {
    logger: ['error', 'warn'],
  });
  return { app, outbox: app.get(lib.OutboxService) };
}

async function cleanup(kind: Kind, dataSource: DataSource | null): Promise<void> {
  if (dataSource) await dropOutboxTables(dataSource, WAKE_TABLE_PREFIX);
  if (kind === 'redis') await deleteRedisKeys(`{${WAKE_REDIS_PREFIX}}:*`);
}

interface RunCommand {
  op: 'run';
  rate: number;
  seconds: number;
  burst: number;
}

/** Child: the producer of the latency variants. */
async function producerMain(kind: Kind, wakeups: boolean): Promise<void> {
  const dataSource = kind === 'pg' ? await openDataSource('postgres') : null;
  const producer = await createProducer(kind, dataSource, wakeups);
  const append = async (committed: [string, number][]) => {
    const id = randomUUID();
    await producer.outbox.append({ type: EVENT_TYPE, payload: { id } });
    committed.push([id, hostNow()]);
  };
  process.on('message', (command: RunCommand | { op: 'exit' }) => {
    if (command.op === 'exit') {
      void producer.app.close().then(async () => {
        await dataSource?.destroy();
        process.exit(0);
      });
      return;
    }
    void (async () => {
      const warmup: [string, number][] = [];
      const steady: [string, number][] = [];
      const burst: [string, number][] = [];
      for (let i = 0; i < WARMUP; i++) {
        await append(warmup);
        await sleep(50);
      }
      const pending: Promise<void>[] = [];
      const t0 = performance.now();
      for (let i = 0; i < command.rate * command.seconds; i++) {
        const wait = t0 + (i * 1000) / command.rate - performance.now();
        if (wait > 0) await sleep(wait);
        pending.push(append(steady));
      }
      await Promise.all(pending);
      await sleep(1_000);
      let left = command.burst;
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          while (left-- > 0) await append(burst);
        }),
      );
      process.send!({ warmup, steady, burst });
    })();
  });
  process.send!('ready');
}

async function latency(kind: Kind, wakeups: boolean, variant: string, round: number) {
  const dataSource = kind === 'pg' ? await openDataSource('postgres') : null;
  await cleanup(kind, dataSource);
  const startedAt = new Map<string, number>();
  sink.onEvent = (event) => {
    const id = (event.payload as { id: string }).id;
    if (!startedAt.has(id)) startedAt.set(id, hostNow());
  };
  const worker = await createOurApp(
    kind === 'pg'
      ? { kind: 'typeorm', dataSource: dataSource!, tablePrefix: WAKE_TABLE_PREFIX }
      : { kind: 'redis', prefix: WAKE_REDIS_PREFIX },
    { wakeups },
  );
  const child = fork(__filename, ['producer', kind, wakeups ? 'on' : 'off'], {
    execArgv: process.execArgv,
    env: process.env,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const reply = new Promise<Record<'warmup' | 'steady' | 'burst', [string, number][]>>((ok) => {
    child.on('message', (m) => {
      if (m === 'ready') {
        child.send({ op: 'run', rate: RATE, seconds: SECONDS, burst: BURST });
      } else {
        ok(m as never);
      }
    });
  });
  const { warmup, steady, burst } = await reply;
  const all = [...warmup, ...steady, ...burst];
  await waitFor(() => all.filter(([id]) => startedAt.has(id)).length, all.length, 60_000, variant);
  const stats = worker.dispatcher.stats();
  child.send({ op: 'exit' });
  await new Promise((r) => child.once('exit', r));
  await worker.close();
  await cleanup(kind, dataSource);
  await dataSource?.destroy();
  const lat = (rows: [string, number][]) => rows.map(([id, at]) => startedAt.get(id)! - at);
  const s = lat(steady);
  const b = lat(burst);
  emit({
    scenario: 'wake',
    variant,
    round,
    n: s.length,
    rate: RATE,
    p50: quantile(s, 0.5),
    p99: quantile(s, 0.99),
    max: Math.max(...s),
    burst: b.length,
    burstP50: quantile(b, 0.5),
    burstP99: quantile(b, 0.99),
    wakeups: stats.wakeups,
    wakeupClaims: stats.wakeupClaims,
    settings: { wakeups, pollInterval: 'default (500)', producerHasHandler: false },
  });
}

async function appendThroughput(
  kind: Kind,
  wakeups: boolean,
  clients: number,
  variant: string,
  round: number,
) {
  const dataSource = kind === 'pg' ? await openDataSource('postgres') : null;
  await cleanup(kind, dataSource);
  const producer = await createProducer(kind, dataSource, wakeups);
  // What one listening worker would receive.
  let signals = 0;
  const store = producer.app.get(lib.OUTBOX_STORE) as {
    onWakeup?: (l: () => void) => () => Promise<void>;
  };
  const unlisten = wakeups ? store.onWakeup?.(() => signals++) : undefined;
  await sleep(300);
  const connected = signals;
  for (let i = 0; i < 50; i++) await producer.outbox.append({ type: EVENT_TYPE, payload: { i } });
  let left = APPEND_N;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (left-- > 0) await producer.outbox.append({ type: EVENT_TYPE, payload: { left } });
    }),
  );
  const ms = performance.now() - t0;
  await sleep(100);
  await unlisten?.();
  await producer.app.close();
  await cleanup(kind, dataSource);
  await dataSource?.destroy();
  emit({
    scenario: 'wake',
    variant,
    round,
    n: APPEND_N,
    eventsPerSec: (APPEND_N * 1000) / ms,
    signalsReceived: signals - connected,
    settings: { wakeups, clients, onePerAppend: true },
  });
}

if (process.argv[2] === 'producer') {
  void producerMain(process.argv[3] as Kind, process.argv[4] === 'on').catch((error) => {
    console.error(error);
    process.exit(1);
  });
} else {
  runMain(async () => {
    const { variant, round } = args();
    const [what, kind, onOff, clients] = variant.split('-');
    if (kind !== 'pg' && kind !== 'redis') throw new Error(`unknown variant ${variant}`);
    if (what === 'latency') return latency(kind, onOff === 'on', variant, round);
    if (what === 'append') {
      return appendThroughput(kind, onOff === 'on', Number(clients), variant, round);
    }
    throw new Error(`unknown variant ${variant}`);
  });
}
