// Run 19: what the per-handler claim costs a worker whose handlers are all backlogged at once
// (fan-out: every event goes to each of FO_HANDLERS handlers). Per round and variant (order
// alternated): fresh tables, FO_EVENTS events appended by the library (one delivery per handler,
// 200 keys), VACUUM ANALYZE, then one loop of store.claim(all handlers, 100) + ackMany until
// nothing is left; prints drain time, claims, and µs per claim (wall and this process's CPU).
//   FO_PGDATABASE=<db> FO_VARIANTS=lib,bench/.lib-before/lib FO_HANDLERS=3 FO_EVENTS=5000 FO_ROUNDS=3 \
//     node -r ../node_modules/ts-node/register/transpile-only src/fanout-claim.ts
// Run 20: FO_PLANS=1 reads back how often the server planned the claim afresh (custom plans; one
// connection then); FO_LOOPS=n runs n loops on the store at once and counts short claims (fewer
// than 100 while at least 100 per loop was still open).
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { DataSource } from 'typeorm';

const VARIANTS = (process.env.FO_VARIANTS ?? 'lib,bench/.lib-before/lib').split(',');
const HANDLERS = Number(process.env.FO_HANDLERS ?? 3);
const EVENTS = Number(process.env.FO_EVENTS ?? 5000);
const ROUNDS = Number(process.env.FO_ROUNDS ?? 3);
const KEYED = process.env.FO_KEYED !== '0';
const PLANS = process.env.FO_PLANS === '1';
const LOOPS = Number(process.env.FO_LOOPS ?? 1);

async function drain(variant: string, round: number) {
  const libDir = path.resolve(__dirname, '../..', variant);
  const internal = require(path.join(libDir, 'stores/typeorm/internal'));
  const dialects = require(path.join(libDir, 'stores/typeorm/dialects'));
  const prefix = `fo_${round}_${Date.now().toString(36)}_`;
  const ds = await new DataSource({
    type: 'postgres',
    host: '127.0.0.1',
    username: 'postgres',
    database: process.env.FO_PGDATABASE ?? 'idleclaim',
    // FO_PLANS=1: one connection, so the claim's prepared statement can be read back from
    // pg_prepared_statements (how often the server planned it afresh).
    ...(PLANS && LOOPS === 1 ? { extra: { max: 1 } } : {}),
  }).initialize();
  const tables = dialects.createDialect(ds, { tablePrefix: prefix }).tables;
  try {
    await internal.ensureOutboxSchema(ds, { tablePrefix: prefix });
    const store = new internal.TypeOrmOutboxStore(ds, { tablePrefix: prefix });
    const names = Array.from({ length: HANDLERS }, (_, i) => `Fan.h${i}`);
    for (let i = 0; i < EVENTS; i += 1000) {
      await store.append(
        Array.from({ length: Math.min(1000, EVENTS - i) }, (_, j) => ({
          id: randomUUID(),
          type: 'fo.event',
          key: KEYED ? `k${(i + j) % 200}` : null,
          payload: { i: i + j },
          headers: {},
          occurredAt: new Date(),
          availableAt: null,
          handlers: names,
        })),
      );
    }
    await ds.query(`VACUUM ANALYZE ${tables.deliveries.text}`);
    const handlers = names.map((name) => ({ name, types: ['fo.event'] }));
    let claims = 0;
    let done = 0;
    // FO_PLANS=1 (one connection): the server backend's own CPU time over the drain, from
    // /proc/<pid>/schedstat (same machine), which the load of other processes changes far less
    // than wall time.
    const backend = PLANS ? Number((await ds.query('SELECT pg_backend_pid() AS pid'))[0].pid) : 0;
    const serverCpu = () =>
      backend ? Number(readFileSync(`/proc/${backend}/schedstat`, 'utf8').split(' ')[0]) : 0;
    const server0 = serverCpu();
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    let claimMs = 0;
    const total = EVENTS * HANDLERS;
    let short = 0;
    // FO_LOOPS claim+ack loops on one store at once (a dispatcher claims ahead like this); a loop
    // that finds nothing while others still hold deliveries waits a little and claims again.
    const loop = async () => {
      for (;;) {
        const c0 = performance.now();
        const claimed = await store.claim({ workerId: 'w', handlers, limit: 100, leaseMs: 60_000 });
        claimMs += performance.now() - c0;
        claims++;
        // Short although at least a full claim per loop was still open after it.
        if (claimed.length < 100 && total - done - claimed.length >= 100 * LOOPS) short++;
        if (claimed.length === 0) {
          if (done >= total) return;
          await new Promise((resolve) => setTimeout(resolve, 1));
          continue;
        }
        await store.ackMany(claimed.map((c: { lease: unknown }) => c.lease));
        done += claimed.length;
      }
    };
    await Promise.all(Array.from({ length: LOOPS }, loop));
    const ms = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const serverUs = (serverCpu() - server0) / 1000 / claims;
    let plans = '';
    if (PLANS) {
      const [p] = await ds.query(
        `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%SKIP LOCKED%lease_token = %'`,
      );
      plans = p
        ? `${p.generic_plans} generic / ${p.custom_plans} custom plans`
        : 'no prepared claim';
    }
    if (done !== EVENTS * HANDLERS) throw new Error(`${variant}: ${done} of ${EVENTS * HANDLERS}`);
    return {
      ms,
      claims,
      claimUs: (claimMs * 1000) / claims,
      cpuUs: (cpu.user + cpu.system) / claims,
      plans,
      short,
      serverUs,
    };
  } finally {
    for (const ddl of dialects.createDialect(ds, { tablePrefix: prefix }).dropSchema())
      await ds.query(ddl);
    await ds.destroy();
  }
}

async function main(): Promise<void> {
  const results = new Map<string, Array<Awaited<ReturnType<typeof drain>>>>();
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? VARIANTS : [...VARIANTS].reverse();
    for (const v of order) {
      const res = await drain(v, r);
      results.set(v, [...(results.get(v) ?? []), res]);
      console.log(
        `round ${r} ${v}: drain ${res.ms.toFixed(0)} ms, ${res.claims} claims (${res.short} short), ${res.claimUs.toFixed(0)} µs/claim wall, ${res.cpuUs.toFixed(0)} µs/claim Node CPU${res.plans ? `, ${res.serverUs.toFixed(0)} µs/claim server CPU, ${res.plans}` : ''}`,
      );
    }
  }
  const [a, b] = VARIANTS;
  if (PLANS) {
    const med = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
    for (const v of VARIANTS)
      console.log(
        `${v}: median ${med(results.get(v)!.map((x) => x.serverUs)).toFixed(0)} µs/claim server CPU, ${med(results.get(v)!.map((x) => x.cpuUs)).toFixed(0)} Node CPU`,
      );
  }
  const ratios = results.get(a)!.map((x, i) => results.get(b)![i].ms / x.ms);
  ratios.sort((x, y) => x - y);
  console.log(
    `drain speed ${a} ÷ ${b}: median ${ratios[Math.floor(ratios.length / 2)].toFixed(2)}× (${ratios.map((x) => x.toFixed(2)).join(', ')})`,
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
