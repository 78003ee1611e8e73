/*
 * Scenario 2 — end-to-end delivery throughput.
 * N events are appended first (not timed), then one worker starts with concurrency 10 and a
 * no-op handler; timed: worker start → the N-th handler call.
 * Not timed: process start, app bootstrap, schema creation, appending the backlog.
 *
 * Variants:
 *   ours-postgres / ours-mariadb / ours-sqlite / ours-sqlite-wal / ours-redis
 *       OutboxModule.forRoot + @OutboxHandler; `dispatcher.enabled: false` at bootstrap and
 *       `OutboxDispatcher.start()` at t0 (the same start() bootstrap calls).
 *   pgboss   pg-boss 10: `work()` called 10 times (its way to get 10 concurrent handlers),
 *            each fetching batchSize jobs every pollingIntervalSeconds (0.5 s, pg-boss's minimum).
 *   bullmq   BullMQ 5 Worker, concurrency 10, default options.
 */
import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import {
  args,
  BULL_PREFIX,
  deleteRedisKeys,
  dropOutboxTables,
  emit,
  envInt,
  now,
  OUR_REDIS_PREFIX,
  openDataSource,
  removeSqliteFile,
  runMain,
  SqlKind,
  waitFor,
} from './common';
import { bullConnection, bullmq, dropPgBossSchema, startPgBoss } from './baselines';
import { createOurApp, EVENT_TYPE, sink } from './ours';

const N = envInt('BENCH_S2_N', 5000);
const CONCURRENCY = 10;
/** Ours: claims never exceed free slots, so a batch above the concurrency changes nothing. */
const OUR_BATCH = envInt('BENCH_S2_BATCH', 10);
const OUR_POLL_MS = envInt('BENCH_S2_POLL_MS', 50);
const PGBOSS_BATCH = envInt('BENCH_S2_PGBOSS_BATCH', 100);
const TIMEOUT_MS = envInt('BENCH_S2_TIMEOUT_MS', 120_000);
const QUEUE = 'bench_s2';

const payload = (i: number) => ({
  orderId: randomUUID(),
  total: i,
  lines: [{ sku: 'A-1', qty: 1 }],
});

runMain(async () => {
  const { variant, round } = args();
  let handled = 0;
  let t0 = 0;
  let t1 = 0;
  const onHandled = () => {
    handled++;
    if (handled === N) t1 = now();
  };
  let settings: Record<string, unknown> = {};

  if (variant.startsWith('ours-')) {
    const kind = variant.slice('ours-'.length);
    let ds: DataSource | null = null;
    if (kind === 'redis') {
      await deleteRedisKeys(`{${OUR_REDIS_PREFIX}}*`);
    } else {
      if (kind.startsWith('sqlite')) removeSqliteFile();
      ds = await openDataSource(kind as SqlKind);
      await dropOutboxTables(ds);
    }
    const dispatcher = {
      enabled: false,
      concurrency: CONCURRENCY,
      batchSize: OUR_BATCH,
      pollInterval: OUR_POLL_MS,
    };
    settings = { ...dispatcher, enabled: 'start() at t0' };
    const app = await createOurApp(
      ds ? { kind: 'typeorm', dataSource: ds } : { kind: 'redis' },
      dispatcher,
    );
    sink.onEvent = onHandled;
    for (let i = 0; i < N; i += 500) {
      const chunk = Array.from({ length: Math.min(500, N - i) }, (_, j) => ({
        type: EVENT_TYPE,
        key: null,
        payload: payload(i + j),
      }));
      await app.outbox.append(chunk);
    }
    t0 = now();
    app.dispatcher.start();
    await waitFor(() => handled, N, TIMEOUT_MS, variant);
    await app.close(); // stops the dispatcher after the last acks
    const stats = app.dispatcher.stats();
    if (stats.succeeded !== N) throw new Error(`acked ${stats.succeeded}/${N}`);
    if (ds) {
      await dropOutboxTables(ds);
      await ds.destroy();
    }
    if (kind.startsWith('sqlite')) removeSqliteFile();
    if (kind === 'redis') await deleteRedisKeys(`{${OUR_REDIS_PREFIX}}*`);
  } else if (variant === 'pgboss') {
    const ds = await openDataSource('postgres');
    await dropPgBossSchema((q) => ds.query(q));
    const boss = await startPgBoss();
    await boss.createQueue(QUEUE);
    for (let i = 0; i < N; i += 1000) {
      const jobs = Array.from({ length: Math.min(1000, N - i) }, (_, j) => ({
        name: QUEUE,
        data: payload(i + j),
      }));
      await boss.insert(jobs);
    }
    settings = {
      workers: CONCURRENCY,
      batchSize: PGBOSS_BATCH,
      pollingIntervalSeconds: 0.5,
      note: 'each worker handles its batch one job at a time',
    };
    t0 = now();
    for (let w = 0; w < CONCURRENCY; w++) {
      await boss.work(
        QUEUE,
        { batchSize: PGBOSS_BATCH, pollingIntervalSeconds: 0.5 },
        async (jobs) => {
          for (const _job of jobs) onHandled();
        },
      );
    }
    await waitFor(() => handled, N, TIMEOUT_MS, variant);
    await boss.stop({ graceful: true, wait: true, timeout: 10_000 });
    await dropPgBossSchema((q) => ds.query(q));
    await ds.destroy();
  } else if (variant === 'bullmq') {
    const { Queue, Worker } = bullmq();
    await deleteRedisKeys(`${BULL_PREFIX}:*`);
    const connection = bullConnection();
    const queue = new Queue(QUEUE, { connection, prefix: BULL_PREFIX });
    for (let i = 0; i < N; i += 1000) {
      await queue.addBulk(
        Array.from({ length: Math.min(1000, N - i) }, (_, j) => ({
          name: EVENT_TYPE,
          data: payload(i + j),
        })),
      );
    }
    settings = { concurrency: CONCURRENCY, options: 'defaults (removeOnComplete: false)' };
    t0 = now();
    const worker = new Worker(
      QUEUE,
      async () => {
        onHandled();
      },
      { connection, prefix: BULL_PREFIX, concurrency: CONCURRENCY },
    );
    await waitFor(() => handled, N, TIMEOUT_MS, variant);
    await worker.close();
    await queue.obliterate({ force: true });
    await queue.close();
    await deleteRedisKeys(`${BULL_PREFIX}:*`);
  } else {
    throw new Error(`unknown variant ${variant}`);
  }

  const ms = t1 - t0;
  emit({ scenario: 's2', variant, round, n: N, ms, eventsPerSec: (N / ms) * 1000, settings });
});
