/*
 * Key heads (run 21): the PostgreSQL claim statement of one handler on four backlog shapes,
 * EXPLAIN (ANALYZE, BUFFERS) of its generic plan (the one a prepared claim keeps after five
 * runs), this build beside another, interleaved, rolled back (nothing is claimed for good).
 *   busy:    200 keys × 100 events, every key's head leased (another worker's, for an hour)
 *   many:    10,000 keys × 1 event (every row a free head)
 *   unkeyed: 20,000 events without a key
 *   mixed:   20,000 events, 9 in 10 keyed (200 keys, heads leased), every 10th unkeyed
 *
 *   node -r ../node_modules/ts-node/register/transpile-only src/key-heads.ts
 *   KH_BASE (a build beside this one's `lib`, e.g. `.lib-before/lib`; required), KH_ROUNDS (5),
 *   KH_SHAPES (busy,many,unkeyed,mixed), BENCH_PGDATABASE. Tables kh_<shape>_*, dropped after.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { DataSource } from 'typeorm';
import { envInt, openDataSource } from './common';

type Store = import('../../lib/stores/typeorm/typeorm-outbox.store').TypeOrmOutboxStore;
type StoreClass = typeof import('../../lib/stores/typeorm/typeorm-outbox.store').TypeOrmOutboxStore;

const ROUNDS = envInt('KH_ROUNDS', 5);
const BASE = process.env.KH_BASE;
const SHAPES: Record<string, { n: number; key: (i: number) => string | null; lease: boolean }> = {
  busy: { n: 20_000, key: (i) => `k${i % 200}`, lease: true },
  many: { n: 10_000, key: (i) => `k${i}`, lease: false },
  unkeyed: { n: 20_000, key: () => null, lease: false },
  mixed: { n: 20_000, key: (i) => (i % 10 ? `k${i % 200}` : null), lease: true },
};
const HANDLER = { name: 'Keyed.step', types: ['keyed.step'] };

function storeClass(root: string): StoreClass {
  return require(`${root}/stores/typeorm/typeorm-outbox.store`).TypeOrmOutboxStore;
}

/** The claim statement a store sends (captured, not run) with its parameters. */
async function claimStatement(
  ds: DataSource,
  store: Store,
): Promise<{ text: string; params: unknown[] }> {
  const create = ds.createQueryRunner.bind(ds);
  let out: { text: string; params: unknown[] } | undefined;
  ds.createQueryRunner = (mode) => {
    const runner = create(mode);
    const query = runner.query.bind(runner);
    runner.query = (async (text: string, params?: unknown[], structured?: boolean) => {
      if (/SKIP LOCKED/.test(text) && /lease_token = /.test(text)) {
        out = { text, params: params ?? [] };
        throw new Error('captured');
      }
      return query(text, params, structured as true);
    }) as typeof runner.query;
    return runner;
  };
  try {
    await store
      .claim({ workerId: 'w', handlers: [HANDLER], limit: 100, leaseMs: 30_000 })
      .catch(() => undefined);
  } finally {
    ds.createQueryRunner = create;
  }
  if (!out) throw new Error('no claim statement seen');
  return out;
}

interface PlanNode {
  Alias?: string;
  'Actual Loops'?: number;
  Plans?: PlanNode[];
}
const nodes = (p: PlanNode): PlanNode[] => [p, ...(p.Plans ?? []).flatMap(nodes)];

async function explain(
  ds: DataSource,
  stmt: { text: string; params: unknown[] },
): Promise<{ buffers: number; ms: number; probes: number; rows: number }> {
  const literal = (v: unknown) =>
    typeof v === 'number' ? String(v) : `'${String(v).replace(/'/g, "''")}'`;
  const runner = ds.createQueryRunner();
  try {
    await runner.startTransaction();
    await runner.query(`SET LOCAL plan_cache_mode = force_generic_plan`);
    await runner.query(`PREPARE kh_claim AS ${stmt.text}`);
    const [row] = await runner.query(
      `EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) EXECUTE kh_claim(${stmt.params.map(literal).join(', ')})`,
    );
    const top = (row['QUERY PLAN'] as Array<Record<string, unknown>>)[0];
    const plan = top.Plan as PlanNode & Record<string, number>;
    return {
      buffers: plan['Shared Hit Blocks'] + plan['Shared Read Blocks'],
      ms: top['Execution Time'] as number,
      probes: nodes(plan)
        .filter((n) => n.Alias === 'p')
        .reduce((s, n) => s + (n['Actual Loops'] ?? 0), 0),
      rows: plan['Actual Rows'],
    };
  } finally {
    await runner.rollbackTransaction();
    await runner.query('DEALLOCATE ALL');
    await runner.release();
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main(): Promise<void> {
  if (!BASE) throw new Error('KH_BASE: the build to compare with (e.g. .lib-before/lib)');
  const builds = {
    this: storeClass('../../lib'),
    base: storeClass(resolve(__dirname, '..', BASE)),
  };
  const { ensureOutboxSchema } = require('../../lib');
  const ds = await openDataSource('postgres');
  const shapes = (process.env.KH_SHAPES ?? Object.keys(SHAPES).join(',')).split(',');
  try {
    for (const shape of shapes) {
      const { n, key, lease } = SHAPES[shape];
      const prefix = `kh_${shape}_`;
      for (const t of ['deliveries', 'dead_letters', 'events', 'schema_version'])
        await ds.query(`DROP TABLE IF EXISTS ${prefix}${t}`);
      await ensureOutboxSchema(ds, { tablePrefix: prefix });
      const store: Store = new builds.this(ds, { tablePrefix: prefix, preparedStatements: false });
      for (let i = 0; i < n; i += 1000)
        await store.append(
          Array.from({ length: Math.min(1000, n - i) }, (_, j) => ({
            id: randomUUID(),
            type: 'keyed.step',
            key: key(i + j),
            payload: { n: i + j },
            headers: {},
            occurredAt: new Date(),
            availableAt: null,
            handlers: [HANDLER.name],
          })),
        );
      if (lease)
        await ds.query(
          `UPDATE ${prefix}deliveries SET status = 'leased', attempts = 1, lease_owner = 'other', lease_token = 'other', lease_until = now() + interval '1 hour'
           WHERE (event_key, event_seq) IN (SELECT event_key, min(event_seq) FROM ${prefix}deliveries WHERE event_key IS NOT NULL GROUP BY event_key)`,
        );
      await ds.query(`VACUUM ANALYZE ${prefix}deliveries`);
      const stmts = {
        this: await claimStatement(ds, store),
        base: await claimStatement(
          ds,
          new builds.base(ds, { tablePrefix: prefix, preparedStatements: false }),
        ),
      };
      const got: Record<string, Array<Awaited<ReturnType<typeof explain>>>> = {
        this: [],
        base: [],
      };
      for (let r = 0; r < ROUNDS; r++) {
        const order = r % 2 ? (['base', 'this'] as const) : (['this', 'base'] as const);
        for (const b of order) got[b].push(await explain(ds, stmts[b]));
      }
      for (const b of ['base', 'this'] as const) {
        const xs = got[b];
        console.log(
          JSON.stringify({
            shape,
            build: b,
            rows: xs[0].rows,
            probes: median(xs.map((x) => x.probes)),
            buffers: median(xs.map((x) => x.buffers)),
            ms: median(xs.map((x) => x.ms)).toFixed(2),
            msAll: xs.map((x) => x.ms.toFixed(1)).join(' '),
          }),
        );
      }
      for (const t of ['deliveries', 'dead_letters', 'events', 'schema_version'])
        await ds.query(`DROP TABLE IF EXISTS ${prefix}${t}`);
    }
  } finally {
    await ds.destroy();
  }
}

void main().catch((error) => {
  console.error(error);
  process.exit(1);
});
