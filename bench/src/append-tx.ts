/*
 * append-tx — append cost per business transaction (PostgreSQL); issue 9's append target:
 * "(business + append) / business ≥ 0.9× of (business + raw INSERT) / business, 1 and 8 clients".
 *
 * C clients (1 or 8), each on its own QueryRunner (its own pooled connection), each running
 * transactions back to back: BEGIN; INSERT one business row; [the variant's outbox write]; COMMIT.
 * Transactions/s = all clients' transactions / (first BEGIN → last COMMIT).
 * Not timed: process start, app bootstrap, schema creation, connecting the clients, the warm-up
 * (WARMUP committed transactions spread over the same clients).
 *
 * Variants (`<kind>-<clients>`):
 *   business-C  the business row only (the baseline both ratios share)
 *   raw-C       + one plain INSERT into a hand-rolled outbox table (S1's bench_handrolled_outbox)
 *   ours-C      + OutboxService.append({ type, key, payload }, { manager: qr.manager }) through the
 *               real NestJS app (dispatcher off, one handler registered: one delivery per event),
 *               library defaults otherwise (wake-ups on: a coalesced pg_notify after commits)
 *   ours-nowake-C  the same with `dispatcher.wakeups: false` (not in the default list: pick it
 *               with BENCH_APPEND_TX_VARIANTS, e.g. ours-1,ours-nowake-1,raw-1)
 *   stmt-C      + the library's own one-event append statement (text and prepared name taken from
 *               a real append), sent straight to the `pg` client with the values an append would
 *               bind, no library code around it: what the statement costs through the driver, so
 *               ours ÷ stmt is the library's own share (not in the default list)
 *
 * Also recorded: Node CPU µs per transaction (process.cpuUsage over the timed window) and, where
 * /proc is readable, the PostgreSQL backends' CPU µs per transaction (every backend connected to
 * BENCH_PGDATABASE: give the benchmark a database of its own for this figure to mean anything).
 */
import { randomUUID } from 'node:crypto';
import type { QueryRunner } from 'typeorm';
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
  threadCpu,
} from './common';
import { insertHandrolled, insertOrder, orderPayload, resetBusinessTables } from './business';
import { libRoot } from './lib';
import { appendOneValues, captureAppendStatement, createOurApp, EVENT_TYPE, OurApp } from './ours';

interface PgClient {
  query(config: { name?: string; text: string; values?: unknown[] }): Promise<unknown>;
}

/** µs on the monotonic clock V8's profiler stamps samples with (`node --cpu-prof`). */
const profileClock = (): string => String(process.hrtime.bigint() / 1000n);

/** Transactions per client in the timed window. */
const PER_CLIENT: Record<number, number> = {
  1: envInt('BENCH_APPEND_TX_N_1', 2_000),
  8: envInt('BENCH_APPEND_TX_N_8', 1_000),
};
/** Committed warm-up transactions (all clients together), not timed. */
const WARMUP = envInt('BENCH_APPEND_TX_WARMUP', 300);
type Kind = 'business' | 'raw' | 'ours' | 'ours-nowake' | 'stmt';
/** The variant's work inside one transaction, after BEGIN. */
type Body = (qr: QueryRunner, id: string, i: number) => Promise<unknown>;

runMain(async () => {
  const { variant, round } = args();
  const kind = variant.slice(0, variant.lastIndexOf('-')) as Kind;
  const clients = Number(variant.slice(variant.lastIndexOf('-') + 1));
  if (
    !['business', 'raw', 'ours', 'ours-nowake', 'stmt'].includes(kind) ||
    !(clients in PER_CLIENT)
  ) {
    throw new Error(`unknown variant ${variant}`);
  }
  const perClient = PER_CLIENT[clients];

  // Pool of 10 (openDataSource): 8 clients hold one connection each for the whole run; the
  // rest is free for what the library does outside the transaction (e.g. a wake-up NOTIFY).
  const ds = await openDataSource('postgres');
  await resetBusinessTables(ds);
  await dropOutboxTables(ds);

  // Wall time of each phase of a transaction, summed over the clients (µs): where a variant's
  // extra time per transaction goes (BEGIN, the business INSERT, the outbox write, COMMIT).
  const phases = { begin: 0, business: 0, outbox: 0, commit: 0 };
  let businessDone = 0;
  const business: Body = async (qr, id, i) => {
    await insertOrder(qr, id, i);
    businessDone = performance.now();
  };

  let ours: OurApp | null = null;
  let body: Body;
  switch (kind) {
    case 'business':
      body = business;
      break;
    case 'raw':
      body = async (qr, id, i) => {
        await business(qr, id, i);
        await insertHandrolled(qr, EVENT_TYPE, id, orderPayload(id, i));
      };
      break;
    case 'ours':
    case 'ours-nowake': {
      ours = await createOurApp(
        { kind: 'typeorm', dataSource: ds },
        kind === 'ours' ? { enabled: false } : { enabled: false, wakeups: false },
      );
      const outbox = ours.outbox;
      body = async (qr, id, i) => {
        await business(qr, id, i);
        await outbox.append(
          { type: EVENT_TYPE, key: id, payload: orderPayload(id, i) },
          { manager: qr.manager },
        );
      };
      break;
    }
    case 'stmt': {
      ours = await createOurApp({ kind: 'typeorm', dataSource: ds }, { enabled: false });
      const statement = await captureAppendStatement(ds, ours);
      // Ids as the library makes them (UUID version 7; required here: older builds have none).
      const newId: () => string = require(`${libRoot}/ids`).newId;
      body = async (qr, id, i) => {
        await business(qr, id, i);
        const client = (await qr.connect()) as PgClient;
        await client.query({
          name: statement.name,
          text: statement.text,
          values: appendOneValues(newId, id, i),
        });
      };
      break;
    }
  }

  // Each client: its own QueryRunner, connected before any timing.
  const runners: QueryRunner[] = [];
  for (let k = 0; k < clients; k++) {
    const qr = ds.createQueryRunner();
    await qr.connect();
    runners.push(qr);
  }
  const runClient = async (qr: QueryRunner, count: number) => {
    for (let i = 0; i < count; i++) {
      const t0 = performance.now();
      await qr.startTransaction();
      const t1 = performance.now();
      try {
        await body(qr, randomUUID(), i);
        const t2 = performance.now();
        await qr.commitTransaction();
        const t3 = performance.now();
        phases.begin += t1 - t0;
        phases.business += businessDone - t1;
        phases.outbox += t2 - businessDone;
        phases.commit += t3 - t2;
      } catch (error) {
        if (qr.isTransactionActive) await qr.rollbackTransaction();
        throw error;
      }
    }
  };
  const runAll = (count: (k: number) => number) =>
    Promise.all(runners.map((qr, k) => runClient(qr, count(k))));

  let total = 0;
  try {
    // Warm-up: WARMUP transactions over the same clients, committed (counted in the check below).
    await runAll((k) => Math.floor(WARMUP / clients) + (k < WARMUP % clients ? 1 : 0));

    // BENCH_APPEND_TX_COUNT=1: statements sent in the timed window, every connection (the
    // patched `pg` query adds a little Node CPU to every variant alike).
    const counter = process.env.BENCH_APPEND_TX_COUNT === '1' ? countStatements() : null;
    const pg0 = postgresBackendCpu(PG.database);
    const cpu0 = process.cpuUsage();
    const threads0 = threadCpu();
    for (const phase of Object.keys(phases) as Array<keyof typeof phases>) phases[phase] = 0;
    // BENCH_APPEND_TX_WINDOW=1: the timed window on stderr, for cpu-profile.ts.
    const window0 = profileClock();
    const t0 = now();
    await runAll(() => perClient);
    const ms = now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const pgMs = cpuBetween(pg0, postgresBackendCpu(PG.database));
    total = perClient * clients;
    const threads: Record<string, number> = {};
    for (const [name, ms] of threadCpu()) {
      const us = ((ms - (threads0.get(name) ?? 0)) * 1000) / total;
      if (us > 0) threads[name] = +us.toFixed(1);
    }
    counter?.stop();
    if (process.env.BENCH_APPEND_TX_WINDOW === '1') {
      process.stderr.write(`window ${window0}:${profileClock()}\n`);
    }

    // Sanity: what committed (warm-up + timed), and nothing else.
    const expected = WARMUP + total;
    const count = async (table: string): Promise<number> =>
      (await ds.query(`SELECT COUNT(*)::int AS n FROM ${table}`))[0].n;
    const rows = await count(BUSINESS_TABLE);
    const events =
      ours !== null
        ? await count(`${TABLE_PREFIX}events`)
        : kind === 'raw'
          ? await count(HANDROLLED_TABLE)
          : 0;
    const wantEvents = kind === 'business' ? 0 : expected;
    if (rows !== expected || events !== wantEvents) {
      throw new Error(
        `committed ${rows} business rows and ${events} events, expected ${expected} and ${wantEvents}`,
      );
    }
    // One handler is registered: each event has one delivery row.
    if (ours !== null && (await count(`${TABLE_PREFIX}deliveries`)) !== expected) {
      throw new Error(`expected ${expected} deliveries (one handler per event)`);
    }
    if (kind !== 'raw' && (await count(HANDROLLED_TABLE)) !== 0) {
      throw new Error('rows in the hand-rolled outbox table');
    }

    emit({
      scenario: 'append-tx',
      variant,
      round,
      clients,
      n: total,
      ms,
      txPerSec: (total / ms) * 1000,
      cpuUsPerTx: (cpu.user + cpu.system) / total,
      sysUsPerTx: cpu.system / total,
      // Node CPU µs/tx by thread (`main`: the JavaScript thread); 10 ms clock ticks.
      threadUsPerTx: threads,
      // Wall µs per transaction in each phase (with C clients: summed over them, ÷ transactions).
      phaseUsPerTx: Object.fromEntries(
        Object.entries(phases).map(([k, ms]) => [k, +((ms * 1000) / total).toFixed(1)]),
      ),
      pgCpuUsPerTx: pgMs > 0 ? +((pgMs * 1000) / total).toFixed(1) : undefined,
      ...(counter
        ? { statementsPerTx: +(counter.count() / total).toFixed(2), statements: counter.texts() }
        : {}),
      settings: {
        clients,
        perClient,
        warmup: WARMUP,
        ...(kind === 'ours' || kind === 'ours-nowake'
          ? { wakeups: kind === 'ours' ? 'library default (on)' : false }
          : {}),
      },
    });
  } finally {
    for (const qr of runners) await qr.release();
    await ours?.close();
    await ds.query(`TRUNCATE ${BUSINESS_TABLE}, ${HANDROLLED_TABLE}`);
    await dropOutboxTables(ds);
    await ds.destroy();
  }
});
