/*
 * Run 25: the server's cost of each statement of a dispatch cycle at defaults (PostgreSQL, one
 * handler, no key), without the dispatcher. The claim and ack statements a store sends (prepared
 * name, text, parameters) are captured from a real claim and ack of each build, then replayed on
 * one `pg` connection: phase 1 claims the whole backlog (limit 100 per claim), phase 2 acks it in
 * batches of ACK leases (fences as the library builds them, several claims' tokens per batch).
 * The backend's CPU (/proc/<pid>/schedstat, ns) per phase ÷ events, builds interleaved per round.
 * With DS_EXPLAIN=1, one EXPLAIN (ANALYZE, BUFFERS) of each statement's generic plan (after five
 * runs) in the middle of the drain (10,000 claimed and running, 10,000 pending), rolled back.
 *
 *   node -r ../node_modules/ts-node/register/transpile-only src/dispatch-stmts.ts
 *   DS_BUILDS (lib,.lib-base/lib), DS_ROUNDS (5), DS_N (20000), DS_ACK (160), DS_EXPLAIN,
 *   BENCH_PGDATABASE. Tables ds_*, dropped after.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { envInt, openDataSource, orderEvents, PG, watchPrepared } from './common';

type StoreClass = typeof import('../../lib/stores/typeorm/typeorm-outbox.store').TypeOrmOutboxStore;

const ROUNDS = envInt('DS_ROUNDS', 5);
const N = envInt('DS_N', 20_000);
const ACK = envInt('DS_ACK', 160);
const LIMIT = 100;
const BUILDS = (process.env.DS_BUILDS ?? 'lib,.lib-base/lib').split(',');
const HANDLER = { name: 'Bench.handler', types: ['bench.event'] };
const P = 'ds_';

function storeClass(build: string): StoreClass {
  const root = build === 'lib' ? '../../lib' : resolve(__dirname, '..', build);
  return require(`${root}/stores/typeorm/typeorm-outbox.store`).TypeOrmOutboxStore;
}

function cpuNs(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
}

interface Pg {
  query(
    q: string | { name?: string; text: string; values?: unknown[] },
    v?: unknown[],
  ): Promise<{
    rows: Record<string, unknown>[];
    rowCount: number | null;
  }>;
  end(): Promise<void>;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main(): Promise<void> {
  const { ensureOutboxSchema } = require('../../lib');
  const ds = await openDataSource('postgres');
  const { Client } = require('pg') as {
    Client: new (o: object) => Pg & { connect(): Promise<void> };
  };
  const pg = new Client({ ...PG });
  await pg.connect();
  const [{ pid }] = (await pg.query('SELECT pg_backend_pid() AS pid')).rows as [{ pid: number }];
  const drop = async () => {
    for (const t of ['deliveries', 'dead_letters', 'events', 'schema_version'])
      await ds.query(`DROP TABLE IF EXISTS ${P}${t}`);
  };
  const fill = async (store: InstanceType<StoreClass>) => {
    await drop();
    await ensureOutboxSchema(ds, { tablePrefix: P });
    for (let i = 0; i < N; i += 1000)
      await store.append(orderEvents(HANDLER, i, Math.min(1000, N - i)));
    await ds.query(`ANALYZE ${P}deliveries`);
    await ds.query(`ANALYZE ${P}events`);
  };
  /** The claim and ack statements of a build, and where the token and limit sit. */
  const capture = async (build: string) => {
    const store = new (storeClass(build))(ds, { tablePrefix: P });
    await fill(store);
    let claimed: Awaited<ReturnType<typeof store.claim>> = [];
    const [claim] = await watchPrepared(ds, async () => {
      claimed = await store.claim({
        workerId: 'w1',
        handlers: [HANDLER],
        limit: 7,
        leaseMs: 30_000,
      });
    });
    const [ack] = await watchPrepared(ds, () => store.ackMany(claimed.map((d) => d.lease)));
    const token = claimed[0].lease.token;
    const tokenAt = claim.values.indexOf(token);
    const limitAt = claim.values.indexOf(7);
    if (tokenAt < 0 || limitAt < 0 || !ack) throw new Error(`${build}: capture failed`);
    // DS_ACK_TEXT (a file): another ack statement of the same parameters ($1 ids, $2 fences),
    // {D} for the deliveries table, in place of the build's (experiments).
    if (process.env.DS_ACK_TEXT && build === 'lib')
      ack.text = readFileSync(process.env.DS_ACK_TEXT, 'utf8').replace(/\{D\}/g, `${P}deliveries`);
    // DS_CLAIM_JS (a module exporting text => text): the build's claim text rewritten (experiments).
    if (process.env.DS_CLAIM_JS && build === 'lib')
      claim.text = require(resolve(process.env.DS_CLAIM_JS))(claim.text);
    return { store, claim, ack, tokenAt, limitAt, token };
  };
  type Captured = Awaited<ReturnType<typeof capture>>;
  const claimOnce = async (c: Captured, name: string) => {
    const token = randomUUID();
    const values = [...c.claim.values];
    values[c.tokenAt] = token;
    values[c.limitAt] = LIMIT;
    const { rows } = await pg.query({ name, text: c.claim.text, values });
    return { token, rows };
  };
  /** The ack's parameters for leases (id, token), built from the captured ones. */
  const ackValues = (c: Captured, leases: Array<{ id: string; token: string }>): unknown[] => {
    const v = c.ack.values;
    const fence0 = (v[1] as string[])[0];
    return [
      leases.map((l) => l.id),
      leases.map((l) => fence0.replace(c.token, l.token)),
      ...v.slice(2),
    ];
  };
  const out: Record<string, { claim: number[]; ack: number[]; ms: number[] }> = {};
  try {
    if (process.env.DS_EXPLAIN) {
      for (const build of BUILDS) {
        const c = await capture(build);
        const name = `ds_x_${build.length}`;
        const leases: Array<{ id: string; token: string }> = [];
        for (let i = 0; i < N / 2 / LIMIT; i++) {
          const { token, rows } = await claimOnce(c, name);
          for (const r of rows) leases.push({ id: String(r.id), token });
        }
        // Acked but the last two claims' (running), as mid-drain at defaults; no vacuum (a drain
        // gets none: autovacuum is off on this cluster, and too slow to matter on others).
        const running = leases.splice(leases.length - 2 * LIMIT);
        for (let i = 0; i < leases.length; i += ACK)
          await pg.query({ text: c.ack.text, values: ackValues(c, leases.slice(i, i + ACK)) });
        leases.splice(0, leases.length, ...running);
        await pg.query('BEGIN');
        const lit = (v: unknown) =>
          Array.isArray(v)
            ? `'{${v.map((x) => `"${String(x)}"`).join(',')}}'`
            : typeof v === 'number'
              ? String(v)
              : `'${String(v).replace(/'/g, "''")}'`;
        await pg.query(`PREPARE xc AS ${c.claim.text}`);
        await pg.query(`PREPARE xa AS ${c.ack.text}`);
        for (let i = 0; i < 6; i++) {
          const part = leases.slice((i % 2) * (LIMIT / 2), (i % 2) * (LIMIT / 2) + ACK / 2);
          await pg.query('SAVEPOINT s');
          const { rows } = await pg.query({
            text: `EXECUTE xc(${(() => {
              const v = [...c.claim.values];
              v[c.tokenAt] = randomUUID();
              v[c.limitAt] = LIMIT;
              return v.map(lit).join(', ');
            })()})`,
          });
          void rows;
          await pg.query(`EXECUTE xa(${ackValues(c, part).map(lit).join(', ')})`);
          await pg.query('ROLLBACK TO SAVEPOINT s');
        }
        const v = [...c.claim.values];
        v[c.tokenAt] = randomUUID();
        v[c.limitAt] = LIMIT;
        const plan = (
          await pg.query(`EXPLAIN (ANALYZE, BUFFERS, VERBOSE) EXECUTE xc(${v.map(lit).join(', ')})`)
        ).rows
          .map((r) => r['QUERY PLAN'])
          .join('\n');
        const aplan = (
          await pg.query(
            `EXPLAIN (ANALYZE, BUFFERS, VERBOSE) EXECUTE xa(${ackValues(c, leases.slice(0, ACK)).map(lit).join(', ')})`,
          )
        ).rows
          .map((r) => r['QUERY PLAN'])
          .join('\n');
        await pg.query('ROLLBACK');
        await pg.query('DEALLOCATE ALL');
        console.log(
          `=== ${build}: claim (limit ${LIMIT})\n${plan}\n=== ${build}: ack (${Math.min(ACK, leases.length)})\n${aplan}\n`,
        );
      }
      return;
    }
    for (let r = 0; r < ROUNDS; r++) {
      const order = r % 2 ? [...BUILDS].reverse() : BUILDS;
      for (const build of order) {
        const c = await capture(build);
        const name = `ds_${r}_${build.length}`;
        await pg.query('CHECKPOINT');
        const t0 = Date.now();
        const c0 = cpuNs(pid);
        // Claims of 100 while the leases of the last two claims run; the acks of finished
        // ones go in batches of ACK (as the dispatcher's ack batcher sends them), so the claim
        // walks over ~200 running rows as in a drain at defaults.
        let leases: Array<{ id: string; token: string }> = [];
        let claimNs = 0;
        let ackNs = 0;
        let acked = 0;
        let events = 0;
        const aname = `${name}_a`;
        const ack = async (part: Array<{ id: string; token: string }>) => {
          part.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
          // DS_ACK_HASH=1: the ack planned with nested loops off (set around it, outside the
          // measured span), so the former ack runs the hash semi-join the drain's statistics
          // gave it (run 25); the claim keeps its own plan.
          if (process.env.DS_ACK_HASH) await pg.query('SET enable_nestloop = off');
          const a0 = cpuNs(pid);
          const res = await pg.query({ name: aname, text: c.ack.text, values: ackValues(c, part) });
          ackNs += cpuNs(pid) - a0;
          if (process.env.DS_ACK_HASH) await pg.query('RESET enable_nestloop');
          acked += res.rowCount ?? 0;
        };
        for (;;) {
          const k0 = cpuNs(pid);
          const { token, rows } = await claimOnce(c, name);
          claimNs += cpuNs(pid) - k0;
          if (rows.length === 0) break;
          events += rows.length;
          for (const row of rows) leases.push({ id: String(row.id), token });
          while (leases.length >= 2 * LIMIT + ACK) {
            await ack(leases.slice(0, ACK));
            leases = leases.slice(ACK);
          }
        }
        while (leases.length > 0) {
          await ack(leases.slice(0, ACK));
          leases = leases.slice(ACK);
        }
        const c1 = c0 + claimNs;
        const c2 = c1 + ackNs;
        const ms = Date.now() - t0;
        if (acked !== events || events !== N - 7)
          throw new Error(`${build}: ${events} claimed, ${acked} acked`);
        const o = (out[build] ??= { claim: [], ack: [], ms: [] });
        o.claim.push((c1 - c0) / 1000 / events);
        o.ack.push((c2 - c1) / 1000 / events);
        o.ms.push(ms);
        console.error(
          `round ${r} ${build}: claim ${((c1 - c0) / 1000 / events).toFixed(1)} µs/event, ack ${((c2 - c1) / 1000 / events).toFixed(1)}, ${ms} ms`,
        );
      }
    }
    for (const build of BUILDS) {
      const o = out[build];
      console.log(
        JSON.stringify({
          build,
          claimUs: median(o.claim).toFixed(1),
          ackUs: median(o.ack).toFixed(1),
          sumUs: median(o.claim.map((x, i) => x + o.ack[i])).toFixed(1),
          claimAll: o.claim.map((x) => x.toFixed(1)).join(' '),
          ackAll: o.ack.map((x) => x.toFixed(1)).join(' '),
          ms: o.ms.join(' '),
        }),
      );
    }
  } finally {
    await drop();
    await pg.end();
    await ds.destroy();
  }
}

void main().catch((error) => {
  console.error(error);
  process.exit(1);
});
