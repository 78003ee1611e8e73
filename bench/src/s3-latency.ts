/*
 * Scenario 3 — latency from a committed append to the start of its handler, at a low rate.
 * RATE events/s for SECONDS seconds, one event per append, appends fired on a fixed schedule
 * (not waiting for each other). Latency = handler start − the moment append()/send()/add()
 * resolved (the event is committed then), both in this process (performance.now()).
 * Not timed: process start, bootstrap, a warm-up of 5 events.
 *
 * Variants:
 *   ours-pg-100 / ours-pg-20   PostgreSQL store, dispatcher pollInterval 100 ms / 20 ms,
 *                              concurrency 10, batchSize 10; append without a manager
 *   pgboss                     pg-boss 10, 10 × work() with batchSize 10 and
 *                              pollingIntervalSeconds 0.5 (its minimum); send()
 *                              (batchSize 1 gives 20 jobs/s, below the rate: latency grows
 *                              without bound)
 *   bullmq                     BullMQ 5 Worker, concurrency 10; queue.add()
 */
import { randomUUID } from 'node:crypto';
import {
  args,
  BULL_PREFIX,
  deleteRedisKeys,
  dropOutboxTables,
  emit,
  envInt,
  now,
  openDataSource,
  quantile,
  runMain,
  sleep,
  waitFor,
} from './common';
import { bullConnection, bullmq, dropPgBossSchema, startPgBoss } from './baselines';
import { createOurApp, EVENT_TYPE, sink } from './ours';

const RATE = envInt('BENCH_S3_RATE', 50);
const SECONDS = envInt('BENCH_S3_SECONDS', 10);
const WARMUP = 5;
const QUEUE = 'bench_s3';
/** pg-boss: 10 workers × PGBOSS_BATCH jobs per 0.5 s poll; with 1, 20 jobs/s is below the rate. */
const PGBOSS_BATCH = envInt('BENCH_S3_PGBOSS_BATCH', 10);

interface Target {
  /** Appends one event carrying `id`; resolves when it is committed. */
  send(id: string): Promise<unknown>;
  close(): Promise<void>;
  settings: Record<string, unknown>;
}

runMain(async () => {
  const { variant, round } = args();
  const committedAt = new Map<string, number>();
  const startedAt = new Map<string, number>();
  const onStart = (id: string) => {
    if (!startedAt.has(id)) startedAt.set(id, now());
  };
  const ds = await openDataSource('postgres');
  let target: Target;

  if (variant === 'ours-pg-100' || variant === 'ours-pg-20') {
    await dropOutboxTables(ds);
    const dispatcher = {
      concurrency: 10,
      batchSize: 10,
      pollInterval: variant === 'ours-pg-100' ? 100 : 20,
    };
    const app = await createOurApp({ kind: 'typeorm', dataSource: ds }, dispatcher);
    sink.onEvent = (event) => onStart((event.payload as { id: string }).id);
    target = {
      send: (id) => app.outbox.append({ type: EVENT_TYPE, key: null, payload: { id } }),
      close: async () => {
        await app.close();
        await dropOutboxTables(ds);
      },
      settings: dispatcher,
    };
  } else if (variant === 'pgboss') {
    await dropPgBossSchema((q) => ds.query(q));
    const boss = await startPgBoss();
    await boss.createQueue(QUEUE);
    for (let w = 0; w < 10; w++) {
      await boss.work(
        QUEUE,
        { batchSize: PGBOSS_BATCH, pollingIntervalSeconds: 0.5 },
        async (jobs) => {
          for (const job of jobs) onStart(job.data.id);
        },
      );
    }
    target = {
      send: (id) => boss.send(QUEUE, { id }),
      close: async () => {
        await boss.stop({ graceful: true, wait: true, timeout: 10_000 });
        await dropPgBossSchema((q) => ds.query(q));
      },
      settings: { workers: 10, batchSize: PGBOSS_BATCH, pollingIntervalSeconds: 0.5 },
    };
  } else if (variant === 'bullmq') {
    const { Queue, Worker } = bullmq();
    await deleteRedisKeys(`${BULL_PREFIX}:*`);
    const connection = bullConnection();
    const queue = new Queue(QUEUE, { connection, prefix: BULL_PREFIX });
    const worker = new Worker(
      QUEUE,
      async (job) => {
        onStart(job.data.id);
      },
      { connection, prefix: BULL_PREFIX, concurrency: 10 },
    );
    await worker.waitUntilReady();
    target = {
      send: (id) => queue.add(EVENT_TYPE, { id }),
      close: async () => {
        await worker.close();
        await queue.obliterate({ force: true });
        await queue.close();
        await deleteRedisKeys(`${BULL_PREFIX}:*`);
      },
      settings: { concurrency: 10, options: 'defaults' },
    };
  } else {
    throw new Error(`unknown variant ${variant}`);
  }

  const fire = async (count: number, rate: number): Promise<string[]> => {
    const ids: string[] = [];
    const pending: Promise<unknown>[] = [];
    const t0 = now();
    for (let i = 0; i < count; i++) {
      const due = t0 + (i * 1000) / rate;
      const wait = due - now();
      if (wait > 0) await sleep(wait);
      const id = randomUUID();
      ids.push(id);
      pending.push(target.send(id).then(() => committedAt.set(id, now())));
    }
    await Promise.all(pending);
    await waitFor(() => ids.filter((i) => startedAt.has(i)).length, count, 30_000, variant);
    return ids;
  };

  await fire(WARMUP, 20);
  const ids = await fire(RATE * SECONDS, RATE);
  await target.close();
  await ds.destroy();

  const latencies = ids.map((id) => startedAt.get(id)! - committedAt.get(id)!);
  emit({
    scenario: 's3',
    variant,
    round,
    n: ids.length,
    rate: RATE,
    p50: quantile(latencies, 0.5),
    p90: quantile(latencies, 0.9),
    p99: quantile(latencies, 0.99),
    max: Math.max(...latencies),
    // A handler can start before the appender's promise resolves (the commit's reply and the
    // handler race in one event loop): counted here, its latency is negative (≈ 0).
    startedBeforeResolve: latencies.filter((l) => l < 0).length,
    settings: target.settings,
  });
});
