/*
 * commit-wake — how soon a worker hears of an append committed in the caller's own transaction,
 * with and without a commit hook (issue 26). One process: the app with its dispatcher on (one
 * handler, pollInterval POLL_MS, 10 s by default, so a poll almost never finds the event first:
 * only the wake-up counts), and one client appending in its own transactions.
 *
 * Variants:
 *   typeorm  store: { type: 'typeorm' }; QueryRunner: BEGIN; append({ manager }); COMMIT. TypeORM
 *            reports the commit (its subscriber), the store wakes the dispatcher after it
 *   pg       store: { type: 'sql', executor: pgExecutor(pool) }; PoolClient: BEGIN; append({ tx });
 *            COMMIT. pg has no commit hook: the append sends a NOTIFY inside the transaction,
 *            which PostgreSQL delivers at COMMIT to the store's LISTEN connection
 *
 * N events, one at a time: each transaction commits, the next starts once the handler ran (then
 * GAP_MS idle), so every event is its own wake-up. Latency = handler start − COMMIT resolved
 * (`p50`, `p95`), and from the moment COMMIT was sent (`sentP50`); performance.now() in one
 * process. Not timed: bootstrap, WARMUP events. Also: statements sent through `pg` per append
 * transaction (BEGIN and COMMIT included; the dispatcher's claims and acks too, so per event
 * rather than per transaction).
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Pool } from 'pg';
import {
  args,
  countStatements,
  dropOutboxTables,
  emit,
  envInt,
  openDataSource,
  PG,
  quantile,
  runMain,
  sleep,
  waitFor,
} from './common';
import { lib } from './lib';
import { createOurApp, EVENT_TYPE, sink } from './ours';

const N = envInt('BENCH_COMMIT_WAKE_N', 200);
const WARMUP = envInt('BENCH_COMMIT_WAKE_WARMUP', 10);
const POLL_MS = envInt('BENCH_COMMIT_WAKE_POLL_MS', 10_000);
const GAP_MS = envInt('BENCH_COMMIT_WAKE_GAP_MS', 20);
const PREFIX = 'bench_cw_';

runMain(async () => {
  const { variant, round } = args();
  if (variant !== 'typeorm' && variant !== 'pg') throw new Error(`unknown variant ${variant}`);
  const ds = await openDataSource('postgres');
  await dropOutboxTables(ds, PREFIX);
  const pool = new Pool({
    host: PG.host,
    port: PG.port,
    user: PG.user,
    database: PG.database,
    max: 5,
  });

  const started = new Map<string, number>();
  sink.onEvent = (event) => {
    const id = (event.payload as { id: string }).id;
    if (!started.has(id)) started.set(id, performance.now());
  };
  const app = await createOurApp(
    variant === 'typeorm'
      ? { kind: 'typeorm', dataSource: ds, tablePrefix: PREFIX }
      : { kind: 'sql', executor: lib.pgExecutor(pool), tablePrefix: PREFIX },
    { pollInterval: POLL_MS },
  );

  /** One append in the caller's transaction; returns when COMMIT was sent and when it resolved. */
  const appendOne = async (id: string): Promise<[number, number]> => {
    const event = { type: EVENT_TYPE, payload: { id } };
    if (variant === 'typeorm') {
      const qr = ds.createQueryRunner();
      try {
        await qr.startTransaction();
        await app.outbox.append(event, { manager: qr.manager });
        const sent = performance.now();
        await qr.commitTransaction();
        return [sent, performance.now()];
      } finally {
        await qr.release();
      }
    }
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await app.outbox.append(event, { tx: client });
      const sent = performance.now();
      await client.query('COMMIT');
      return [sent, performance.now()];
    } finally {
      client.release();
    }
  };

  const fromCommit: number[] = [];
  const fromSent: number[] = [];
  let statements: ReturnType<typeof countStatements> | null = null;
  try {
    // Let the LISTEN connection come up and the first (startup) claim pass.
    await sleep(1_000);
    for (let i = 0; i < WARMUP + N; i++) {
      if (i === WARMUP) statements = countStatements();
      const id = randomUUID();
      const [sent, committed] = await appendOne(id);
      await waitFor(() => (started.has(id) ? 1 : 0), 1, POLL_MS * 2, `${variant} event ${i}`);
      if (i >= WARMUP) {
        fromCommit.push(started.get(id)! - committed);
        fromSent.push(started.get(id)! - sent);
      }
      await sleep(GAP_MS);
    }
    const perEvent = statements!.count() / N;
    statements!.stop();
    const stats = app.dispatcher.stats();
    emit({
      scenario: 'commit-wake',
      variant,
      round,
      n: N,
      p50: quantile(fromCommit, 0.5),
      p95: quantile(fromCommit, 0.95),
      max: Math.max(...fromCommit),
      sentP50: quantile(fromSent, 0.5),
      statementsPerEvent: +perEvent.toFixed(2),
      statements: statements!.texts(),
      wakeups: stats.wakeups,
      wakeupClaims: stats.wakeupClaims,
      settings: { pollInterval: POLL_MS, gapMs: GAP_MS, warmup: WARMUP },
    });
  } finally {
    statements?.stop();
    await app.close();
    await pool.end();
    await dropOutboxTables(ds, PREFIX);
    await ds.destroy();
  }
});
