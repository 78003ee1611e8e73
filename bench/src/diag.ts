/*
 * Diagnostics (not a timed comparison): counts the SQL statements our store sends per event and
 * the size of each claim, for scenario 1 (append in a transaction) and scenario 2 (delivery) on
 * PostgreSQL. Explains where the time goes; see RESULTS.md.
 *   node -r ../node_modules/ts-node/register/transpile-only src/diag.ts
 */
import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import {
  BUSINESS_TABLE,
  dropOutboxTables,
  now,
  PG,
  runMain,
  TABLE_PREFIX,
  waitFor,
} from './common';
import { lib } from './lib';
import { createOurApp, EVENT_TYPE, sink } from './ours';

const N = 2000;

function classify(query: string): string {
  const q = query.trim().replace(/\s+/g, ' ');
  if (/^(SAVEPOINT|RELEASE SAVEPOINT|ROLLBACK TO SAVEPOINT)/i.test(q)) return q.split(' ')[0];
  if (/^(START TRANSACTION|BEGIN|COMMIT|ROLLBACK)/i.test(q)) return 'transaction control';
  if (q.startsWith(`SELECT id, event_type FROM "${TABLE_PREFIX}deliveries" WHERE handler =`))
    return 'claim: expand probe (unexpanded deliveries)';
  if (q.startsWith('WITH c AS MATERIALIZED')) return 'claim: UPDATE … SKIP LOCKED';
  if (q.includes(`SET status = 'delivered'`)) return 'ack UPDATE';
  if (q.startsWith(`SELECT e.id AS event_id`)) return 'append: SELECT existing ids';
  if (q.startsWith(`INSERT INTO "${TABLE_PREFIX}events"`)) return 'append: INSERT events';
  if (q.startsWith(`INSERT INTO "${TABLE_PREFIX}deliveries"`)) return 'append: INSERT deliveries';
  if (q.startsWith(`INSERT INTO ${BUSINESS_TABLE}`)) return 'business INSERT';
  return q.slice(0, 60);
}

runMain(async () => {
  const counts = new Map<string, number>();
  const ds = await new DataSource({
    type: 'postgres',
    host: PG.host,
    port: PG.port,
    username: PG.user,
    database: PG.database,
    extra: { max: 10 },
    logging: ['query'],
    logger: {
      logQuery: (q: string) => counts.set(classify(q), (counts.get(classify(q)) ?? 0) + 1),
      logQueryError: () => undefined,
      logQuerySlow: () => undefined,
      logSchemaBuild: () => undefined,
      logMigration: () => undefined,
      log: () => undefined,
    },
  }).initialize();
  await dropOutboxTables(ds);
  await ds.query(
    `CREATE TABLE IF NOT EXISTS ${BUSINESS_TABLE} (id UUID PRIMARY KEY, total INTEGER NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
  );
  await ds.query(`TRUNCATE ${BUSINESS_TABLE}`);
  const app = await createOurApp(
    { kind: 'typeorm', dataSource: ds },
    { enabled: false, concurrency: 10, batchSize: 10, pollInterval: 50 },
  );
  const report = (title: string) => {
    console.log(`\n${title} (per event, N=${N})`);
    for (const [k, v] of [...counts.entries()].sort((a, b) => b[1] - a[1])) {
      console.log(`  ${(v / N).toFixed(2).padStart(6)}  ${k}`);
    }
    counts.clear();
  };

  // Scenario 1 shape: business row + append(event, { manager }) per row, one transaction.
  counts.clear();
  const qr = ds.createQueryRunner();
  await qr.connect();
  await qr.startTransaction();
  for (let i = 0; i < N; i++) {
    const id = randomUUID();
    await qr.query(`INSERT INTO ${BUSINESS_TABLE} (id, total) VALUES ($1, $2)`, [id, i]);
    await app.outbox.append(
      { type: EVENT_TYPE, key: id, payload: { orderId: id } },
      { manager: qr.manager },
    );
  }
  await qr.commitTransaction();
  await qr.release();
  report('Append in a transaction: statements');

  // Scenario 2 shape: backlog of N (the ones above), then the dispatcher drains it.
  const store = app.app.get(lib.OUTBOX_STORE) as {
    claim: (...a: any[]) => Promise<unknown[]>;
    ack: (...a: any[]) => Promise<void>;
  };
  const claimSizes: number[] = [];
  const claimMs: number[] = [];
  const ackMs: number[] = [];
  const claim = store.claim.bind(store);
  const ack = store.ack.bind(store);
  store.ack = async (...a: any[]) => {
    const t = now();
    await ack(...a);
    ackMs.push(now() - t);
  };
  const inFlight: number[] = [];
  const sampler = setInterval(() => inFlight.push(app.dispatcher.stats().inFlight), 1);
  store.claim = async (...a: any[]) => {
    const t = now();
    const rows = await claim(...a);
    claimMs.push(now() - t);
    claimSizes.push(rows.length);
    return rows;
  };
  let handled = 0;
  sink.onEvent = () => handled++;
  const t0 = now();
  app.dispatcher.start();
  await waitFor(() => handled, N, 120_000, 'diag');
  const ms = now() - t0;
  clearInterval(sampler);
  await app.close();
  report(`Delivery: statements (${((N / ms) * 1000).toFixed(0)} events/s with counting on)`);
  const hist = new Map<number, number>();
  for (const s of claimSizes) hist.set(s, (hist.get(s) ?? 0) + 1);
  console.log(
    `  claims: ${claimSizes.length}, mean size ${(N / claimSizes.length).toFixed(2)}, ` +
      `mean claim() ${(claimMs.reduce((a, b) => a + b, 0) / claimMs.length).toFixed(2)} ms; sizes ` +
      [...hist.entries()]
        .sort((a, b) => a[0] - b[0])
        .map(([s, c]) => `${s}×${c}`)
        .join(' '),
  );
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  console.log(
    `  ack(): mean ${mean(ackMs).toFixed(2)} ms; handlers in flight (1 ms samples): mean ${mean(inFlight).toFixed(1)} of 10`,
  );
  await dropOutboxTables(ds);
  await ds.query(`TRUNCATE ${BUSINESS_TABLE}`);
  await ds.destroy();
});
