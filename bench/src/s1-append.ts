/*
 * Scenario 1 — append throughput inside one business transaction (PostgreSQL).
 * N business-row INSERTs, each followed by its event, all in ONE transaction, then COMMIT.
 * Timed: BEGIN … COMMIT. Not timed: process start, app bootstrap, schema creation, warm-up.
 *
 * Variants:
 *   ours            OutboxService.append(event, { manager }) after each business row (real API)
 *   ours-batch      the same events, one append([...500]) per 500 business rows (still in the tx)
 *   handrolled      a plain INSERT into a hand-rolled outbox table, same transaction
 *   pgboss          boss.send() on pg-boss's own pool: NOT part of the business transaction
 *   pgboss-tx       boss.send(..., { db }) with a db adapter over the transaction's connection
 */
import { randomUUID } from 'node:crypto';
import type { QueryRunner } from 'typeorm';
import {
  args,
  BUSINESS_TABLE,
  dropOutboxTables,
  emit,
  envInt,
  HANDROLLED_TABLE,
  now,
  openDataSource,
  runMain,
} from './common';
import { dropPgBossSchema, PgBossLike, startPgBoss } from './baselines';
import { insertHandrolled, insertOrder, orderPayload, resetBusinessTables } from './business';
import { createOurApp, EVENT_TYPE, OurApp } from './ours';

const N = envInt('BENCH_S1_N', 5000);
const WARMUP = envInt('BENCH_S1_WARMUP', 300);
const QUEUE = 'bench_s1';
const BATCH = 500;

type Step = (qr: QueryRunner, i: number, id: string, payload: object) => Promise<void>;

runMain(async () => {
  const { variant, round } = args();
  const ds = await openDataSource('postgres');
  await resetBusinessTables(ds);
  await dropOutboxTables(ds);
  await dropPgBossSchema((q) => ds.query(q));

  let ours: OurApp | null = null;
  let boss: PgBossLike | null = null;
  let step: Step;
  let flush: (qr: QueryRunner) => Promise<void> = async () => undefined;

  const business = insertOrder;

  switch (variant) {
    case 'ours':
    case 'ours-batch': {
      // The dispatcher is off: only append is measured. One handler is registered, so each
      // event gets one delivery row (as in a real app).
      ours = await createOurApp({ kind: 'typeorm', dataSource: ds }, { enabled: false });
      const outbox = ours.outbox;
      if (variant === 'ours') {
        step = async (qr, i, id, payload) => {
          await business(qr, id, i);
          await outbox.append({ type: EVENT_TYPE, key: id, payload }, { manager: qr.manager });
        };
      } else {
        let pending: Array<{ type: string; key: string; payload: object }> = [];
        flush = async (qr) => {
          if (pending.length === 0) return;
          const events = pending;
          pending = [];
          await outbox.append(events, { manager: qr.manager });
        };
        step = async (qr, i, id, payload) => {
          await business(qr, id, i);
          pending.push({ type: EVENT_TYPE, key: id, payload });
          if (pending.length >= BATCH) await flush(qr);
        };
      }
      break;
    }
    case 'handrolled':
      step = async (qr, i, id, payload) => {
        await business(qr, id, i);
        await insertHandrolled(qr, EVENT_TYPE, id, payload);
      };
      break;
    case 'pgboss':
    case 'pgboss-tx': {
      boss = await startPgBoss();
      await boss.createQueue(QUEUE);
      const b = boss;
      step =
        variant === 'pgboss'
          ? async (qr, i, id, payload) => {
              await business(qr, id, i);
              await b.send(QUEUE, payload);
            }
          : async (qr, i, id, payload) => {
              await business(qr, id, i);
              const db = {
                executeSql: async (text: string, values: unknown[]) => ({
                  rows: (await qr.query(text, values, true)).records ?? [],
                }),
              };
              await b.send(QUEUE, payload, { db });
            };
      break;
    }
    default:
      throw new Error(`unknown variant ${variant}`);
  }

  const transaction = async (count: number, commit: boolean): Promise<number> => {
    const qr = ds.createQueryRunner();
    await qr.connect();
    const t0 = now();
    await qr.startTransaction();
    try {
      for (let i = 0; i < count; i++) {
        const id = randomUUID();
        await step(qr, i, id, orderPayload(id, i));
      }
      await flush(qr);
      if (commit) await qr.commitTransaction();
      else await qr.rollbackTransaction();
      return now() - t0;
    } finally {
      if (qr.isTransactionActive) await qr.rollbackTransaction();
      await qr.release();
    }
  };

  await transaction(WARMUP, false); // JIT and connection warm-up, rolled back
  const ms = await transaction(N, true);

  // Sanity: what committed.
  const [{ n: rows }] = await ds.query(`SELECT COUNT(*)::int AS n FROM ${BUSINESS_TABLE}`);
  let events = -1;
  if (variant.startsWith('ours')) {
    [{ n: events }] = await ds.query(`SELECT COUNT(*)::int AS n FROM bench_ob_events`);
  } else if (variant === 'handrolled') {
    [{ n: events }] = await ds.query(`SELECT COUNT(*)::int AS n FROM ${HANDROLLED_TABLE}`);
  } else {
    [{ n: events }] = await ds.query(
      `SELECT COUNT(*)::int AS n FROM bench_pgboss.job WHERE name = $1`,
      [QUEUE],
    );
  }
  // pg-boss without the transaction also kept the warm-up's jobs: they were never rolled back.
  const expected = variant === 'pgboss' ? N + WARMUP : N;
  if (rows !== N || events !== expected)
    throw new Error(`committed ${rows} rows and ${events} events`);

  await ours?.close();
  await boss?.stop({ graceful: false, wait: true });
  await ds.query(`TRUNCATE ${BUSINESS_TABLE}, ${HANDROLLED_TABLE}`);
  await dropOutboxTables(ds);
  await dropPgBossSchema((q) => ds.query(q));
  await ds.destroy();
  emit({ scenario: 's1', variant, round, n: N, ms, eventsPerSec: (N / ms) * 1000 });
});
