/*
 * prisma-append-tx — append cost per business transaction through Prisma 7 (@prisma/adapter-pg,
 * PostgreSQL): what an app on Prisma pays for `outbox.append(…, { tx })` against writing its own
 * outbox row in the same interactive transaction.
 *
 * C clients (1 or 8), each running interactive transactions back to back:
 * prisma.$transaction(async (tx) => { INSERT one business row through tx; [the variant's outbox
 * write through tx] }). Transactions/s = all clients' transactions / the timed window.
 * Not timed: process start, app bootstrap, schema creation, the warm-up (WARMUP transactions).
 *
 * Variants (`<kind>-<clients>`):
 *   business-C  the business row only
 *   raw-C       + one plain INSERT into the hand-rolled outbox table through tx.$executeRaw
 *   ours-C      + OutboxService.append({ type, key, payload }, { tx }) through the real NestJS
 *               app with store: { type: 'sql', executor: prismaExecutor(prisma) } (dispatcher off,
 *               one handler: one delivery per event; wake-ups at their default, on)
 */
import { randomUUID } from 'node:crypto';
import { PrismaPg } from '@prisma/adapter-pg';
import {
  BUSINESS_TABLE,
  args,
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
} from './common';
import { orderPayload, resetBusinessTables } from './business';
import { lib } from './lib';
import { createOurApp, EVENT_TYPE, OurApp } from './ours';
// The Prisma client of the repository's tests (`npm run prisma:test-client` generates it).
import { PrismaClient } from '../../test/fixtures/prisma/generated/client';

type Tx = Parameters<Parameters<PrismaClient['$transaction']>[0]>[0];

const PER_CLIENT: Record<number, number> = {
  1: envInt('BENCH_PRISMA_TX_N_1', 1_000),
  8: envInt('BENCH_PRISMA_TX_N_8', 500),
};
const WARMUP = envInt('BENCH_PRISMA_TX_WARMUP', 200);

runMain(async () => {
  const { variant, round } = args();
  const kind = variant.slice(0, variant.lastIndexOf('-'));
  const clients = Number(variant.slice(variant.lastIndexOf('-') + 1));
  if (!['business', 'raw', 'ours'].includes(kind) || !(clients in PER_CLIENT)) {
    throw new Error(`unknown variant ${variant}`);
  }
  const perClient = PER_CLIENT[clients];
  const ds = await openDataSource('postgres');
  await resetBusinessTables(ds);
  await dropOutboxTables(ds);
  // Prisma's pool: one connection per client plus the outbox's (its own pool, from these options).
  const prisma = new PrismaClient({
    adapter: new PrismaPg({
      host: PG.host,
      port: PG.port,
      user: PG.user,
      database: PG.database,
      max: 10,
    }),
  });

  const business = (tx: Tx, id: string, i: number) =>
    tx.$executeRawUnsafe(`INSERT INTO ${BUSINESS_TABLE} (id, total) VALUES ($1::uuid, $2)`, id, i);
  let ours: OurApp | null = null;
  let body: (tx: Tx, id: string, i: number) => Promise<unknown> = business;
  if (kind === 'raw') {
    body = async (tx, id, i) => {
      await business(tx, id, i);
      await tx.$executeRawUnsafe(
        `INSERT INTO ${HANDROLLED_TABLE} (id, type, event_key, payload) VALUES ($1::uuid, $2, $3, $4::jsonb)`,
        randomUUID(),
        EVENT_TYPE,
        id,
        JSON.stringify(orderPayload(id, i)),
      );
    };
  } else if (kind === 'ours') {
    ours = await createOurApp(
      { kind: 'sql', executor: lib.prismaExecutor(prisma) },
      { enabled: false },
    );
    const outbox = ours.outbox;
    body = async (tx, id, i) => {
      await business(tx, id, i);
      await outbox.append({ type: EVENT_TYPE, key: id, payload: orderPayload(id, i) }, { tx });
    };
  }
  const runClient = async (count: number) => {
    for (let i = 0; i < count; i++) {
      await prisma.$transaction((tx) => body(tx, randomUUID(), i));
    }
  };
  const runAll = (count: (k: number) => number) =>
    Promise.all(Array.from({ length: clients }, (_, k) => runClient(count(k))));

  try {
    await runAll((k) => Math.floor(WARMUP / clients) + (k < WARMUP % clients ? 1 : 0));
    const pg0 = postgresBackendCpu(PG.database);
    const cpu0 = process.cpuUsage();
    const t0 = now();
    await runAll(() => perClient);
    const ms = now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const pgMs = cpuBetween(pg0, postgresBackendCpu(PG.database));
    const total = perClient * clients;

    const expected = WARMUP + total;
    const count = async (table: string): Promise<number> =>
      (await ds.query(`SELECT COUNT(*)::int AS n FROM ${table}`))[0].n;
    const events =
      kind === 'ours'
        ? await count(`${TABLE_PREFIX}events`)
        : kind === 'raw'
          ? await count(HANDROLLED_TABLE)
          : 0;
    const wantEvents = kind === 'business' ? 0 : expected;
    if ((await count(BUSINESS_TABLE)) !== expected || events !== wantEvents) {
      throw new Error(`committed rows or events differ from ${expected} / ${wantEvents}`);
    }
    emit({
      scenario: 'prisma-append-tx',
      variant,
      round,
      clients,
      n: total,
      ms,
      txPerSec: (total / ms) * 1000,
      cpuUsPerTx: (cpu.user + cpu.system) / total,
      pgCpuUsPerTx: pgMs > 0 ? +((pgMs * 1000) / total).toFixed(1) : undefined,
      settings: { clients, perClient, warmup: WARMUP },
    });
  } finally {
    await ours?.close();
    await prisma.$disconnect();
    await ds.query(`TRUNCATE ${BUSINESS_TABLE}, ${HANDROLLED_TABLE}`);
    await dropOutboxTables(ds);
    await ds.destroy();
  }
});
