// Run 19: MariaDB's claim for the case of idle-claim.ts (the worker's handlers with little or
// nothing open, another handler with a backlog). Tables made and filled by the library; the
// claim's window select (the statement that reads candidates) as the store sends it, then
// ANALYZE FORMAT=JSON of it: rows read and the index used.
//   IC_MYDATABASE=<db> IC_LIB=lib IC_OTHER=50000 IC_MINE=0 IC_HANDLERS=mine \
//     node -r ../node_modules/ts-node/register/transpile-only src/idle-claim-maria.ts
import { randomUUID } from 'node:crypto';
import * as path from 'node:path';
import { DataSource } from 'typeorm';

const libDir = path.resolve(__dirname, '../..', process.env.IC_LIB ?? 'lib');
const internal = require(path.join(libDir, 'stores/typeorm/internal'));
const dialects = require(path.join(libDir, 'stores/typeorm/dialects'));

const OTHER = Number(process.env.IC_OTHER ?? 50_000);
const MINE = Number(process.env.IC_MINE ?? 0);
const HANDLERS = (process.env.IC_HANDLERS ?? 'mine').split(',');
const PREFIX = process.env.IC_PREFIX ?? `icm_${Date.now().toString(36)}_`;

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

async function main(): Promise<void> {
  const ds = await new DataSource({
    type: 'mariadb',
    host: '127.0.0.1',
    username: 'root',
    password: '',
    database: process.env.IC_MYDATABASE ?? 'test',
  }).initialize();
  const dialect = dialects.createDialect(ds, { tablePrefix: PREFIX });
  const [{ n }] = await ds.query(
    `SELECT count(*) AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?`,
    [`${PREFIX}deliveries`],
  );
  const store = new internal.TypeOrmOutboxStore(ds, { tablePrefix: PREFIX });
  if (Number(n) === 0) {
    await internal.ensureOutboxSchema(ds, { tablePrefix: PREFIX });
    let mine = 0;
    for (let b = 0; b * 1000 < OTHER; b++) {
      const rows = [];
      for (let i = 0; i < 1000 && b * 1000 + i < OTHER; i++) {
        const j = b * 1000 + i;
        rows.push(ev('other.event', `k${j % 200}`, ['other']));
        if (MINE > 0 && j % Math.max(1, Math.floor(OTHER / MINE)) === 0 && mine < MINE) {
          mine++;
          for (const h of HANDLERS) rows.push(ev(`${h}.event`, `m${mine % 200}`, [h]));
        }
      }
      await store.append(rows);
    }
    await ds.query(`ANALYZE TABLE ${dialect.tables.deliveries.text}`);
  }
  const sent: Array<{ text: string; params: unknown[] }> = [];
  const create = ds.createQueryRunner.bind(ds);
  ds.createQueryRunner = (mode?: 'master' | 'slave') => {
    const r = create(mode);
    const q = r.query.bind(r);
    r.query = (async (text: string, params?: unknown[], s?: boolean) => {
      if (/^SELECT/.test(text) && /ORDER BY c\.event_seq/.test(text))
        sent.push({ text, params: params ?? [] });
      return q(text, params, s as true);
    }) as typeof r.query;
    return r;
  };
  const handlers = HANDLERS.map((h) => ({ name: h, types: [`${h}.event`] }));
  const claimed = await store.claim({ workerId: 'w', handlers, limit: 100, leaseMs: 60_000 });
  ds.createQueryRunner = create;
  const [{ open }] = await ds.query(
    `SELECT GROUP_CONCAT(CONCAT(handler, '=', c) ORDER BY handler SEPARATOR ', ') AS open FROM (SELECT handler, count(*) c FROM ${dialect.tables.deliveries.text} GROUP BY handler) s`,
  );
  console.log(`open: ${open}; worker ${HANDLERS.join(',')}; claimed ${claimed.length}`);
  const { text, params } = sent[0];
  const [row] = await ds.query(`ANALYZE FORMAT=JSON ${text}`, params);
  const plan = JSON.parse(String(Object.values(row)[0]));
  const tables: string[] = [];
  const walk = (o: unknown): void => {
    if (Array.isArray(o)) return o.forEach(walk);
    if (!o || typeof o !== 'object') return;
    const t = (o as Record<string, unknown>).table as Record<string, unknown> | undefined;
    if (t && t.alias === undefined && t.table_name)
      tables.push(
        `${String(t.table_name).replace(PREFIX, '')}: ${t.access_type} ${t.key ?? ''} r_rows=${t.r_rows} r_loops=${t.r_loops ?? 1} r_total_time_ms=${t.r_total_time_ms}`,
      );
    for (const v of Object.values(o as Record<string, unknown>)) walk(v);
  };
  walk(plan);
  console.log(`window select: r_total_time_ms=${plan.query_block?.r_total_time_ms}`);
  console.log(tables.slice(0, 6).join('\n'));
  if (process.env.IC_FULL) console.log(JSON.stringify(plan, null, 1));
  if (!process.env.IC_KEEP) for (const ddl of dialect.dropSchema()) await ds.query(ddl);
  await ds.destroy();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
