/*
 * inbox — claim cost per consumed message (issue 25, defect 12): one business transaction per
 * message, the inbox claim beside one business row, compared with the same claim written by hand.
 *
 * C clients (1 or 8) run messages back to back; each message is one transaction on a pooled
 * connection taken for it and given back after it (as the library's inbox does):
 *   raw-C   TypeORM QueryRunner: BEGIN; INSERT INTO <inbox> … ON CONFLICT DO NOTHING (MariaDB:
 *           INSERT IGNORE); the business INSERT when it took the key; COMMIT
 *   ours-C  the library's InboxStore.run (what InboxService.run / @Inbox() call) with the business
 *           INSERT inside the work, library defaults (lockTimeoutMs 5 s)
 * Both use the same inbox table (created by the library), the same business table and the same
 * DataSource settings. Messages/s = all messages / (first BEGIN → last COMMIT), after WARMUP
 * messages over the same clients. `-maria` variants (raw-maria-C, ours-maria-C; opt-in with
 * BENCH_INBOX_VARIANTS) run the same on MariaDB.
 *
 * Also recorded: statements per message (every statement TypeORM sent in the timed window, counted
 * by a TypeORM logger in both variants, ÷ messages) and Node CPU µs per message.
 * The previous build: BENCH_LIB (README), or `ours-1@.lib-before/lib` in BENCH_INBOX_VARIANTS.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { DataSource, Logger } from 'typeorm';
import { args, emit, envInt, MARIA, now, PG, runMain, TABLE_PREFIX } from './common';
import { libRoot } from './lib';

const PER_CLIENT: Record<number, number> = {
  1: envInt('BENCH_INBOX_N_1', 2_000),
  8: envInt('BENCH_INBOX_N_8', 1_000),
};
const WARMUP = envInt('BENCH_INBOX_WARMUP', 300);
const CONSUMER = 'bench.inbox';
const ORDERS = 'bench_inbox_orders';

type InboxStoreClass = typeof import('../../lib/inbox/inbox.store').InboxStore;

/** Counts every statement TypeORM sends (BEGIN and COMMIT included) while on. */
class Counter implements Logger {
  on = false;
  statements = 0;
  logQuery(): void {
    if (this.on) this.statements++;
  }
  logQueryError(): void {}
  logQuerySlow(): void {}
  logSchemaBuild(): void {}
  logMigration(): void {}
  log(): void {}
}

runMain(async () => {
  const { variant, round } = args();
  const m = /^(raw|ours)(-maria)?-(\d+)$/.exec(variant);
  if (!m || !(Number(m[3]) in PER_CLIENT)) throw new Error(`unknown variant ${variant}`);
  const kind = m[1] as 'raw' | 'ours';
  const maria = m[2] !== undefined;
  const clients = Number(m[3]);
  const perClient = PER_CLIENT[clients];

  const counter = new Counter();
  const ds = await new DataSource(
    maria
      ? {
          type: 'mariadb',
          host: MARIA.host,
          port: MARIA.port,
          username: MARIA.user,
          password: '',
          database: MARIA.database,
          extra: { connectionLimit: 10 },
          logger: counter,
        }
      : {
          type: 'postgres',
          host: PG.host,
          port: PG.port,
          username: PG.user,
          database: PG.database,
          extra: { max: 10 },
          logger: counter,
        },
  ).initialize();

  const InboxStore: InboxStoreClass = require(`${libRoot}/inbox/inbox.store`).InboxStore;
  const store = new InboxStore(ds, { tablePrefix: TABLE_PREFIX });
  await store.dropSchema();
  await store.ensureSchema();
  const inbox = store.names.table;
  await ds.query(`DROP TABLE IF EXISTS ${ORDERS}`);
  await ds.query(
    maria
      ? `CREATE TABLE ${ORDERS} (id CHAR(36) PRIMARY KEY, total INT NOT NULL, created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE=InnoDB`
      : `CREATE TABLE ${ORDERS} (id UUID PRIMARY KEY, total INTEGER NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
  );
  const insertOrder = maria
    ? `INSERT INTO ${ORDERS} (id, total) VALUES (?, ?)`
    : `INSERT INTO ${ORDERS} (id, total) VALUES ($1, $2)`;
  const claim = maria
    ? `INSERT IGNORE INTO ${inbox} (consumer, message_id, processed_at, fingerprint) VALUES (?, ?, UTC_TIMESTAMP(3), ?)`
    : `INSERT INTO ${inbox} (consumer, message_id, fingerprint) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`;

  const raw = async (id: string, i: number): Promise<void> => {
    const qr = ds.createQueryRunner('master');
    try {
      await qr.startTransaction();
      const claimed = await qr.query(claim, [CONSUMER, id, null], true);
      if (Number(claimed.affected ?? 0) > 0) await qr.query(insertOrder, [id, i]);
      await qr.commitTransaction();
    } catch (error) {
      if (qr.isTransactionActive) await qr.rollbackTransaction();
      throw error;
    } finally {
      await qr.release();
    }
  };
  const ours = async (id: string, i: number): Promise<void> => {
    const result = await store.run(CONSUMER, id, (manager) => manager.query(insertOrder, [id, i]));
    if (result.duplicate) throw new Error(`message ${id} counted as a duplicate`);
  };
  const one = kind === 'raw' ? raw : ours;

  const runAll = (count: (k: number) => number) =>
    Promise.all(
      Array.from({ length: clients }, async (_, k) => {
        for (let i = 0; i < count(k); i++) await one(randomUUID(), i);
      }),
    );

  try {
    await runAll((k) => Math.floor(WARMUP / clients) + (k < WARMUP % clients ? 1 : 0));
    const total = perClient * clients;
    counter.on = true;
    const cpu0 = process.cpuUsage();
    const t0 = now();
    await runAll(() => perClient);
    const ms = now() - t0;
    const cpu = process.cpuUsage(cpu0);
    counter.on = false;

    // Sanity: one inbox record and one business row per message, nothing else.
    const expected = WARMUP + total;
    const count = async (table: string): Promise<number> =>
      Number((await ds.query(`SELECT COUNT(*) AS n FROM ${table}`))[0].n);
    const [records, rows] = [await count(inbox), await count(ORDERS)];
    if (records !== expected || rows !== expected) {
      throw new Error(
        `committed ${records} inbox records and ${rows} business rows, expected ${expected}`,
      );
    }

    emit({
      scenario: 'inbox',
      variant,
      round,
      clients,
      n: total,
      ms,
      msgPerSec: (total / ms) * 1000,
      statementsPerMsg: +(counter.statements / total).toFixed(2),
      cpuUsPerMsg: (cpu.user + cpu.system) / total,
      settings: { db: maria ? 'mariadb' : 'postgres', clients, perClient, warmup: WARMUP },
    });
  } finally {
    await ds.query(`DROP TABLE IF EXISTS ${ORDERS}`);
    await store.dropSchema();
    await ds.destroy();
  }
});
