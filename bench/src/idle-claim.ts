// Run 19: the claim's generic plan when the claiming worker's handlers have little or nothing open
// and other handlers have a large backlog. Tables made and filled by the library (store.append),
// the claim statement as the store sends it, then PREPAREd and run 6 times (the server's own
// choice of the generic plan) and EXPLAIN (ANALYZE, BUFFERS) EXECUTEd in a rolled-back transaction.
//   IC_PGDATABASE=<db> IC_LIB=lib IC_OTHER=50000 IC_MINE=0 IC_HANDLERS=mine \
//     node -r ../node_modules/ts-node/register/transpile-only src/idle-claim.ts
// IC_MINE: open deliveries of each of the worker's handlers (IC_HANDLERS, comma-separated),
// interleaved with the other handler's; IC_KEEP=1 keeps the tables of IC_PREFIX for another run.
// IC_TIMES=n: then n timed executions (median). IC_DRAIN=1: after the six runs, delete the worker's handlers' deliveries (VACUUM, no ANALYZE) and
// EXPLAIN then: the plan the server chose while they were busy, now with nothing of theirs open.
import { randomUUID } from 'node:crypto';
import * as path from 'node:path';
import { DataSource } from 'typeorm';

const libDir = path.resolve(__dirname, '../..', process.env.IC_LIB ?? 'lib');
const internal = require(path.join(libDir, 'stores/typeorm/internal'));
const dialects = require(path.join(libDir, 'stores/typeorm/dialects'));

const OTHER = Number(process.env.IC_OTHER ?? 50_000);
const MINE = Number(process.env.IC_MINE ?? 0);
const HANDLERS = (process.env.IC_HANDLERS ?? 'mine').split(',');
const LIMIT = Number(process.env.IC_LIMIT ?? 100);
const PREFIX = process.env.IC_PREFIX ?? `ic_${Date.now().toString(36)}_`;

async function main(): Promise<void> {
  const ds = await new DataSource({
    type: 'postgres',
    host: '127.0.0.1',
    username: 'postgres',
    database: process.env.IC_PGDATABASE ?? 'idleclaim',
  }).initialize();
  const tables = dialects.createDialect(ds, { tablePrefix: PREFIX }).tables;
  const [{ n }] = await ds.query(`SELECT count(*)::int AS n FROM pg_tables WHERE tablename = $1`, [
    `${PREFIX}deliveries`,
  ]);
  const store = new internal.TypeOrmOutboxStore(ds, {
    tablePrefix: PREFIX,
    preparedStatements: false,
  });
  if (n === 0) {
    await internal.ensureOutboxSchema(ds, { tablePrefix: PREFIX });
    // Interleaved: per batch of 1,000 other events, the worker's handlers' share.
    const batches = Math.ceil(OTHER / 1000);
    for (let b = 0; b < batches; b++) {
      const rows = [];
      for (let i = 0; i < 1000 && b * 1000 + i < OTHER; i++) {
        rows.push(
          ev('other.event', `k${(b * 1000 + i) % 200}`, [process.env.IC_OTHER_NAME ?? 'other']),
        );
        const j = b * 1000 + i;
        if (MINE > 0 && j % Math.max(1, Math.floor(OTHER / MINE)) === 0 && mineCount < MINE) {
          mineCount++;
          for (const h of HANDLERS) rows.push(ev(`${h}.event`, `m${mineCount % 200}`, [h]));
        }
      }
      await store.append(rows);
    }
    await ds.query(`VACUUM ANALYZE ${tables.deliveries.text}`);
    await ds.query(`VACUUM ANALYZE ${tables.events.text}`);
  }
  const [{ open }] = await ds.query(
    `SELECT string_agg(handler || '=' || c, ', ') AS open FROM (SELECT handler, count(*) c FROM ${tables.deliveries.text} GROUP BY 1 ORDER BY 1) s`,
  );
  // The claim statement as sent (unprepared store, same text as the prepared one).
  const sent: Array<{ text: string; params: unknown[] }> = [];
  const create = ds.createQueryRunner.bind(ds);
  ds.createQueryRunner = (mode?: 'master' | 'slave') => {
    const r = create(mode);
    const q = r.query.bind(r);
    r.query = (async (text: string, params?: unknown[], s?: boolean) => {
      if (/lease_token = /.test(text) && /SKIP LOCKED/.test(text)) {
        sent.push({ text, params: params ?? [] });
        throw new Error('captured');
      }
      return q(text, params, s as true);
    }) as typeof r.query;
    return r;
  };
  const request = {
    workerId: 'w',
    handlers: HANDLERS.map((h) => ({ name: h, types: [`${h}.event`] })),
    limit: LIMIT,
    leaseMs: 60_000,
  };
  await store.claim(request).catch(() => undefined);
  ds.createQueryRunner = create;
  const { text, params } = sent[0];
  const runner = ds.createQueryRunner();
  if (process.env.IC_GENERIC) await runner.query(`SET plan_cache_mode = force_generic_plan`);
  await runner.query(`PREPARE ic_claim AS ${text}`);
  const lit = (v: unknown) =>
    typeof v === 'number' ? String(v) : `'${String(v).replace(/'/g, "''")}'`;
  const exec = `EXECUTE ic_claim(${params.map(lit).join(', ')})`;
  let claimed = 0;
  for (let i = 0; i < 6; i++) {
    await runner.query('BEGIN');
    claimed = (await runner.query(exec)).length;
    await runner.query('ROLLBACK');
  }
  if (process.env.IC_DRAIN) {
    // The worker's handlers drain after the server settled on a plan for their busy claims: the
    // same prepared statement, no new statistics (VACUUM, no ANALYZE).
    await ds.query(`DELETE FROM ${tables.deliveries.text} WHERE handler = ANY($1)`, [HANDLERS]);
    await ds.query(`VACUUM ${tables.deliveries.text}`);
  }
  const out: string[] = [];
  for (let i = 0; i < 3; i++) {
    await runner.query('BEGIN');
    const plan = await runner.query(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ${exec}`);
    await runner.query('ROLLBACK');
    if (i === 2) for (const r of plan) out.push(r['QUERY PLAN']);
  }
  console.log(`open: ${open}; worker ${HANDLERS.join(',')}; claimed ${claimed}`);
  if (process.env.IC_VERBOSE) console.log(text + '\n-- params: ' + JSON.stringify(params));
  const generic = /\$1(?!\d)/.test(out.join('\n')) ? 'generic' : 'custom';
  console.log(`plan: ${generic}`);
  if (process.env.IC_FULL) console.log(out.join('\n'));
  else {
    // The candidates (CTE c: its first Limit node), the whole statement, the scan's index.
    const lim = out.findIndex((l) => /->\s+Limit/.test(l));
    const buf = (i: number) =>
      out
        .slice(i)
        .find((l) => /Buffers:/.test(l))
        ?.trim();
    const time = (l: string) => /actual time=[\d.]+\.\.([\d.]+)/.exec(l)?.[1];
    const scans = [
      ...new Set(
        out
          .filter((l) => /Scan using \S+_(claim_idx|event_handler_uq) on \S+ c\b/.test(l))
          .map((l) => /using (\S+)/.exec(l)![1]),
      ),
    ];
    console.log(
      `candidates: ${time(out[lim])} ms, ${buf(lim)}; statement: ${buf(0)}; ${out.find((l) => /Execution Time/.test(l))}; scan: ${scans.join(', ')}`,
    );
  }
  if (process.env.IC_TIMES) {
    // Run 20: the statement's time as the client sees it, median of IC_TIMES executions (each in
    // a rolled-back transaction, so every one claims from the same rows).
    const ms: number[] = [];
    for (let i = 0; i < Number(process.env.IC_TIMES); i++) {
      await runner.query('BEGIN');
      const t0 = performance.now();
      await runner.query(exec);
      ms.push(performance.now() - t0);
      await runner.query('ROLLBACK');
    }
    ms.sort((a, b) => a - b);
    console.log(
      `executions: median ${ms[Math.floor(ms.length / 2)].toFixed(2)} ms (p25 ${ms[Math.floor(ms.length / 4)].toFixed(2)}, p75 ${ms[Math.floor((ms.length * 3) / 4)].toFixed(2)}) of ${ms.length}`,
    );
  }
  await runner.query('DEALLOCATE ic_claim');
  await runner.release();
  if (!process.env.IC_KEEP)
    for (const ddl of dialects.createDialect(ds, { tablePrefix: PREFIX }).dropSchema())
      await ds.query(ddl);
  await ds.destroy();
}

let mineCount = 0;
function ev(type: string, key: string, handlers: string[]) {
  return {
    id: randomUUID(),
    type,
    key,
    payload: { x: 1 },
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers,
  };
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
