/*
 * Dispatch scenario — throughput of draining a pre-filled backlog (issue 9, "Benchmark").
 * N events (default 20 000, no key) are put in the queue first (not timed); then one worker starts
 * with a no-op handler; events/s = N / (worker start → the N-th handler call).
 * Not timed: process start, app bootstrap, schema creation, filling the backlog and the history.
 * Every variant checks what it did (handled exactly N, acked/deleted/completed N, nothing left)
 * and throws otherwise; every variant removes what it created, also when it fails.
 *
 * Variants (all in their own process, see run.ts):
 *   ours-<store>-defaults   OutboxModule.forRoot + @OutboxHandler, `dispatcher: { enabled: false }`
 *                           only (the library's defaults for everything else), then
 *                           OutboxDispatcher.start() at t0. <store>: pg, mariadb, sqlite (WAL), redis.
 *   ours-<store>-tuned      the same with `concurrency: 100, batchSize: 100`.
 *   ours-<store>-batch      the defaults, the no-op handler a batch handler
 *                           (`@OutboxHandler(type, { batch: { max: 100 } })`, BENCH_BATCH_MAX).
 *   ours-pg-history         ours-pg-<BENCH_DISPATCH_HISTORY_CONFIG> (tuned by default) with
 *                           BENCH_DISPATCH_HISTORY_N (1 000 000) delivered events retained in our
 *                           tables, filled with set-based SQL and ANALYZEd before the backlog.
 *   ours-pg-history-empty   the same preparation (VACUUM ANALYZE, CHECKPOINT) with no history
 *                           rows: the baseline of the history ratio, so only the retained rows
 *                           differ between the two runs.
 *   raw-pg                  the ceiling: a plain table claimed 100 rows at a time by
 *                           `UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED) RETURNING`, then
 *                           `DELETE … WHERE id = ANY($1)`, 4 concurrent loops on a pg Pool.
 *   stmt-pg                 our schema and our own claim and ack statements (text, prepared name
 *                           and parameters taken from a real claim and ack of the store) in the
 *                           raw-pg loop: 4 loops, 100 per claim, no dispatcher, no fences kept,
 *                           no events built. stmt-pg ÷ raw-pg is what the statements cost (schema,
 *                           per-delivery state, fencing in SQL); ours ÷ stmt-pg the library's share.
 *   pgboss                  pg-boss 10: 10 × work(), batchSize 100, pollingIntervalSeconds 0.5.
 *   graphile                graphile-worker 0.17 batch jobs: N / 100 jobs whose payload is an array
 *                           of 100 events, run() with concurrency 10.
 *   graphile-<n>            the same with n events a job (BENCH_DISPATCH_GRAPHILE_BATCH sets the
 *                           plain variant's): graphile-1 is one job row per event, the layout of an
 *                           outbox whose events are appended one per business transaction.
 *   graphile-<n>-local      the same with graphile-worker's batching on: `localQueue: { size: 100 }`
 *                           (jobs fetched and locked 100 at a time), `completeJobBatchDelay: 0`.
 *   bullmq                  BullMQ 5 Worker, concurrency 50, defaults otherwise.
 *   raw-lua                 the Redis ceiling: a sorted set claimed 100 at a time by one Lua call
 *                           (ZPOPMIN + lease zset + payload hash) and acked by another, 4 loops.
 */
import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import {
  args,
  BULL_PREFIX,
  cpuBetween,
  deleteRedisKeys,
  dropOutboxTables,
  emit,
  envInt,
  now,
  OUR_REDIS_PREFIX,
  openDataSource,
  PG,
  PGBOSS_SCHEMA,
  postgresBackendCpu,
  RAW_REDIS_PREFIX,
  redisCostPerEvent,
  redisServerSnapshot,
  RedisServerSnapshot,
  RAW_TABLE,
  REDIS_URL,
  removeSqliteFile,
  runMain,
  SqlKind,
  TABLE_PREFIX,
  watchPrepared,
  waitFor,
} from './common';
import {
  bullConnection,
  bullmq,
  dropGraphileSchema,
  dropPgBossSchema,
  graphileWorker,
  startPgBoss,
} from './baselines';
import { stores } from './lib';
import { BATCH_MAX, batchCalls, createOurApp, EVENT_TYPE, HANDLER_NAME, sink } from './ours';

const N = envInt('BENCH_DISPATCH_N', 20_000);
const HISTORY_N = envInt('BENCH_DISPATCH_HISTORY_N', 1_000_000);
const HISTORY_CONFIG = process.env.BENCH_DISPATCH_HISTORY_CONFIG ?? 'tuned';
const TUNED = {
  concurrency: envInt('BENCH_DISPATCH_TUNED_CONCURRENCY', 100),
  batchSize: envInt('BENCH_DISPATCH_TUNED_BATCH', 100),
};
const RAW_BATCH = envInt('BENCH_DISPATCH_RAW_BATCH', 100);
/** `dispatcher.batchSize` of `ours-*-batch` (unset: the library's default). */
const BATCH_CLAIM = process.env.BENCH_BATCH_CLAIM ? envInt('BENCH_BATCH_CLAIM', 100) : undefined;
const RAW_LOOPS = envInt('BENCH_DISPATCH_RAW_LOOPS', 4);
const PGBOSS_WORKERS = 10;
const PGBOSS_BATCH = envInt('BENCH_DISPATCH_PGBOSS_BATCH', 100);
const GRAPHILE_CONCURRENCY = envInt('BENCH_DISPATCH_GRAPHILE_CONCURRENCY', 10);
const GRAPHILE_BATCH = envInt('BENCH_DISPATCH_GRAPHILE_BATCH', 100);
const BULLMQ_CONCURRENCY = envInt('BENCH_DISPATCH_BULLMQ_CONCURRENCY', 50);
const TIMEOUT_MS = envInt('BENCH_DISPATCH_TIMEOUT_MS', 600_000);
const QUEUE = 'bench_dispatch';

const payload = (i: number) => ({
  orderId: randomUUID(),
  total: i,
  lines: [{ sku: 'A-1', qty: 1 }],
});

/** Counts handler calls; t1 is the moment of the N-th. */
class Counter {
  handled = 0;
  t1 = 0;
  private start = 0;
  /** CPU time of this process (µs) at t0 and at the N-th call: Node's own cost per event. */
  cpu0: NodeJS.CpuUsage | null = null;
  cpu1: NodeJS.CpuUsage | null = null;
  /** CPU ms of the PostgreSQL backends serving the bench database, at t0 and at the N-th call. */
  pg0: Map<number, number> | null = null;
  pg1: Map<number, number> | null = null;
  private mono0 = 0n;
  private perf0 = 0;
  get t0(): number {
    return this.start;
  }
  set t0(value: number) {
    this.start = value;
    this.cpu0 = process.cpuUsage();
    this.pg0 = postgresBackendCpu(PG.database);
    this.mono0 = process.hrtime.bigint();
    this.perf0 = performance.now();
  }
  readonly hit = (): void => {
    this.handled++;
    if (this.handled === N) {
      this.t1 = now();
      this.cpu1 = process.cpuUsage(this.cpu0 ?? undefined);
      this.pg1 = postgresBackendCpu(PG.database);
      // The drain's window on the monotonic clock V8's profiler stamps samples with: with
      // `node --cpu-prof`, the samples between these two are the drain's (no fill, no bootstrap).
      if (process.env.BENCH_DRAIN_WINDOW) {
        const us = (t: bigint) => String(t / 1000n);
        console.error(`BENCH_DRAIN_WINDOW ${us(this.mono0)} ${us(process.hrtime.bigint())}`);
        // The same window in ms since the process started, the clock of `--trace-gc-nvp`'s lines
        // (src/gc-survival.ts).
        const ms = (t: bigint) => (Number(t - this.mono0) / 1e6 + this.perf0).toFixed(1);
        console.error(
          `BENCH_DRAIN_WINDOW_MS ${this.perf0.toFixed(1)} ${ms(process.hrtime.bigint())}`,
        );
      }
    }
  };
  wait(what: string): Promise<void> {
    return waitFor(() => this.handled, N, TIMEOUT_MS, what);
  }
  /** Exactly N: fewer is a lost event, more a duplicate (no handler fails here, so none is due). */
  check(what: string): void {
    if (this.handled !== N) throw new Error(`${what}: handled ${this.handled}, expected ${N}`);
  }
}

type Extra = Record<string, unknown>;

/** Runs `body`, then `cleanup` whether or not it failed (a cleanup error never hides the first). */
async function withCleanup<T>(cleanup: () => Promise<void>, body: () => Promise<T>): Promise<T> {
  let result: T;
  try {
    result = await body();
  } catch (error) {
    await cleanup().catch((e) => console.error('cleanup after a failure failed too:', e));
    throw error;
  }
  await cleanup();
  return result;
}

/**
 * Redis server cost of the timed drain (start → last ack / worker closed), per event: commands,
 * µs inside commands (scripts included), server CPU. Server-wide counters: meaningful per event
 * only on a Redis the benchmark has to itself (BENCH_REDIS_URL), see RESULTS.md.
 */
async function redisCost(before: RedisServerSnapshot): Promise<Extra> {
  return redisCostPerEvent(before, await redisServerSnapshot(), N);
}

// ---------------------------------------------------------------------------------------------
// ours

const STORES: Record<string, SqlKind | 'redis'> = {
  pg: 'postgres',
  mariadb: 'mariadb',
  sqlite: 'sqlite-wal',
  redis: 'redis',
};

async function ours(
  c: Counter,
  store: string,
  config: string,
  history: boolean,
  historyRows = HISTORY_N,
): Promise<Extra> {
  const kind = STORES[store];
  if (!kind || (config !== 'defaults' && config !== 'tuned' && config !== 'batch')) {
    throw new Error(`unknown variant ours-${store}-${config}`);
  }
  let ds: DataSource | null = null;
  const cleanup = async () => {
    if (ds) {
      await dropOutboxTables(ds);
      await ds.destroy();
    }
    if (kind === 'sqlite-wal') removeSqliteFile();
    if (kind === 'redis') await deleteRedisKeys(`{${OUR_REDIS_PREFIX}}*`);
  };
  if (kind === 'redis') {
    await deleteRedisKeys(`{${OUR_REDIS_PREFIX}}*`);
  } else {
    if (kind === 'sqlite-wal') removeSqliteFile();
    ds = await openDataSource(kind);
    await dropOutboxTables(ds);
  }
  return withCleanup(cleanup, async () => {
    // Defaults: nothing but `enabled: false` (start() at t0), so whatever the library's defaults
    // are at the commit under test is what is measured.
    // `batch`: the defaults, with the handler taking up to BATCH_MAX events a call.
    const dispatcher =
      config === 'tuned'
        ? { enabled: false, ...TUNED }
        : config === 'batch' && BATCH_CLAIM !== undefined
          ? { enabled: false, batchSize: BATCH_CLAIM }
          : { enabled: false };
    const app = await createOurApp(
      ds ? { kind: 'typeorm', dataSource: ds } : { kind: 'redis' },
      dispatcher,
      config === 'batch' ? 'batch' : 'single',
    );
    let closed = false;
    try {
      let historyInfo: Extra = {};
      if (history) {
        if (!ds || kind !== 'postgres') throw new Error('the history scenario is PostgreSQL only');
        historyInfo = await fillHistory(ds, historyRows);
      }
      sink.onEvent = c.hit;
      for (let i = 0; i < N; i += 500) {
        const chunk = Array.from({ length: Math.min(500, N - i) }, (_, j) => ({
          type: EVENT_TYPE,
          key: null,
          payload: payload(i + j),
        }));
        await app.outbox.append(chunk);
      }
      if (history && ds) await checkHistoryHandler(ds, historyInfo);
      const redisBefore = kind === 'redis' ? await redisServerSnapshot() : null;
      c.t0 = now();
      app.dispatcher.start();
      await c.wait(`ours-${store}-${config}`);
      await app.close(); // stops the dispatcher after the last acks
      closed = true;
      const redis = redisBefore ? await redisCost(redisBefore) : undefined;
      const stats = app.dispatcher.stats();
      if (stats.succeeded !== N)
        throw new Error(`acked ${stats.succeeded}/${N}: ${JSON.stringify(stats)}`);
      c.check(`ours-${store}-${config}`);
      // What the library resolved (its defaults may change; the report shows what ran).
      const resolved = (app.dispatcher as unknown as { config?: Record<string, unknown> }).config;
      return {
        settings: {
          given: { ...dispatcher, enabled: 'start() at t0' },
          ...(config === 'batch'
            ? {
                handler: `batch: { max: ${BATCH_MAX} }`,
                eventsPerCall: +(N / batchCalls.n).toFixed(1),
              }
            : {}),
          resolved: resolved
            ? {
                concurrency: resolved.concurrency,
                batchSize: resolved.batchSize,
                pollInterval: resolved.pollInterval,
              }
            : 'n/a',
          ...(kind === 'postgres' || kind === 'mariadb' ? { typeormPool: 10 } : {}),
          ...(history ? { history: historyInfo } : {}),
        },
        ...(redis ? { redis } : {}),
      };
    } finally {
      if (!closed) await app.close().catch(() => undefined);
    }
  });
}

/**
 * Fills `n` delivered, retained events with set-based SQL (generate_series), then ANALYZE.
 * Schema-aware: with a `<prefix>dead_letters` table (the design where delivered deliveries are
 * deleted) a delivered event is an events row without a deliveries row, so only events are
 * inserted; without it (delivered deliveries stay, status 'delivered') each event also gets its
 * delivered delivery row. Column lists are read from the catalog and every column gets a value cast
 * to its own type; a NOT NULL column without a default that is not known here fails loudly.
 */
async function fillHistory(ds: DataSource, n: number): Promise<Extra> {
  const E = `${TABLE_PREFIX}events`;
  const D = `${TABLE_PREFIX}deliveries`;
  const DL = `${TABLE_PREFIX}dead_letters`;
  const [{ has_dl: hasDeadLetters }] = await ds.query(
    `SELECT to_regclass($1) IS NOT NULL AS has_dl`,
    [DL],
  );
  const mode = hasDeadLetters
    ? 'events only (delivered = no deliveries row)'
    : 'events + delivered deliveries';
  const started = Date.now();
  // Ids ascend (hex of the row number, version nibble 0, so no clash with the library's v4 ids):
  // filling a unique index in order is much faster than at random places, and the claim never
  // reads these indexes.
  const eventValues: Record<string, string> = {
    id: `lpad(to_hex(:offset + g), 32, '0')`, // :offset = rows filled before this chunk
    type: `'${EVENT_TYPE}'`,
    event_key: 'NULL',
    payload: `json_build_object('orderId', gen_random_uuid(), 'total', g, 'lines', json_build_array(json_build_object('sku', 'A-1', 'qty', 1)))`,
    headers: `'{}'`,
    occurred_at: 'now()',
    available_at: 'now()',
    created_at: 'now()',
  };
  const deliveryValues: Record<string, string> = {
    id: `lpad(to_hex(e.seq), 32, '0')`,
    event_seq: 'e.seq',
    event_type: 'e.type',
    event_key: 'e.event_key',
    handler: `'${HANDLER_NAME}'`,
    status: `'delivered'`,
    attempts: '1',
    available_at: 'now()',
    lease_owner: 'NULL',
    lease_token: 'NULL',
    lease_until: 'NULL',
    reason: 'NULL',
    errors: `'[]'`,
    done_at: 'now()',
  };
  const events = await insertList(ds, E, eventValues, ['seq']);
  const deliveries = hasDeadLetters ? null : await insertList(ds, D, deliveryValues, []);
  const CHUNK = 250_000;
  for (let done = 0; done < n; done += CHUNK) {
    const size = Math.min(CHUNK, n - done);
    const values = events.values.replace(/:offset/g, String(done));
    const insertEvents = `INSERT INTO ${E} (${events.columns}) SELECT ${values} FROM generate_series(1, ${size}) AS g`;
    if (!deliveries) {
      await ds.query(insertEvents);
    } else {
      await ds.query(
        `WITH e AS (${insertEvents} RETURNING seq, type, event_key) INSERT INTO ${D} (${deliveries.columns}) SELECT ${deliveries.values} FROM e`,
      );
    }
  }
  // VACUUM (not only ANALYZE) and a checkpoint: otherwise autovacuum of the freshly written
  // million rows and the checkpoint it triggers land in the timed window and are measured as if
  // the history slowed the claim (run 4: history ÷ empty moved between 0.67 and 1.41 per round).
  await ds.query(`VACUUM ANALYZE ${E}`);
  if (!hasDeadLetters) await ds.query(`VACUUM ANALYZE ${D}`);
  await ds.query('CHECKPOINT');
  const [{ c }] = await ds.query(`SELECT count(*)::int AS c FROM ${E}`);
  if (c !== n) throw new Error(`history: ${c} events in ${E}, expected ${n}`);
  return { rows: n, mode, fillMs: Date.now() - started };
}

/** `column list` and `value list` for an INSERT … SELECT into `table`, from the catalog. */
async function insertList(
  ds: DataSource,
  table: string,
  known: Record<string, string>,
  skip: string[],
): Promise<{ columns: string; values: string }> {
  const cols: Array<{ name: string; type: string; notnull: boolean; hasdefault: boolean }> =
    await ds.query(
      `SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS notnull, a.atthasdef AS hasdefault
         FROM pg_attribute a
        WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum`,
      [table],
    );
  if (cols.length === 0) throw new Error(`history: table ${table} not found`);
  const names: string[] = [];
  const values: string[] = [];
  for (const col of cols) {
    if (skip.includes(col.name)) continue;
    const v = known[col.name];
    if (v === undefined) {
      if (col.notnull && !col.hasdefault) {
        throw new Error(
          `history: ${table}.${col.name} (${col.type}) is NOT NULL without a default and unknown to the bench; add it to fillHistory`,
        );
      }
      continue;
    }
    names.push(col.name);
    values.push(`(${v})::${col.type}`);
  }
  return { columns: names.join(', '), values: values.join(', ') };
}

/** The history must look like ours: with delivery rows, their handler is the one the app uses. */
async function checkHistoryHandler(ds: DataSource, info: Extra): Promise<void> {
  if (String(info.mode).startsWith('events only')) return;
  const rows: Array<{ handler: string; status: string; c: number }> = await ds.query(
    `SELECT handler, status, count(*)::int AS c FROM ${TABLE_PREFIX}deliveries GROUP BY handler, status ORDER BY status`,
  );
  const handlers = new Set(rows.map((r) => r.handler));
  const delivered = rows.find((r) => r.status === 'delivered')?.c ?? 0;
  if (handlers.size !== 1 || !handlers.has(HANDLER_NAME) || delivered !== HISTORY_N) {
    throw new Error(`history: deliveries do not look like ours: ${JSON.stringify(rows)}`);
  }
}

// ---------------------------------------------------------------------------------------------
// raw claim + delete on PostgreSQL

async function rawPg(c: Counter): Promise<Extra> {
  const { Pool } = require('pg');
  const pool = new Pool({ ...PG, max: RAW_LOOPS + 1 });
  const drop = () => pool.query(`DROP TABLE IF EXISTS ${RAW_TABLE}`);
  await drop();
  return withCleanup(
    async () => {
      await drop();
      await pool.end();
    },
    async () => {
      await pool.query(`CREATE TABLE ${RAW_TABLE} (
  id BIGSERIAL PRIMARY KEY,
  type VARCHAR(255) NOT NULL,
  payload JSON NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  locked_until TIMESTAMPTZ
)`);
      for (let i = 0; i < N; i += 5000) {
        const chunk = Array.from({ length: Math.min(5000, N - i) }, (_, j) =>
          JSON.stringify(payload(i + j)),
        );
        await pool.query(
          `INSERT INTO ${RAW_TABLE} (type, payload) SELECT $1, p FROM unnest($2::json[]) AS p`,
          [EVENT_TYPE, chunk],
        );
      }
      await pool.query(`ANALYZE ${RAW_TABLE}`);
      const claim = `UPDATE ${RAW_TABLE} SET locked_until = now() + interval '30 seconds'
WHERE id IN (SELECT id FROM ${RAW_TABLE} WHERE locked_until IS NULL OR locked_until < now() ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id, type, payload`;
      const remove = `DELETE FROM ${RAW_TABLE} WHERE id = ANY($1::bigint[])`;
      let deleted = 0;
      const handler = async (_row: unknown) => c.hit();
      const loop = async () => {
        for (;;) {
          const { rows } = await pool.query(claim, [RAW_BATCH]);
          if (rows.length === 0) return; // nothing is added meanwhile: the backlog is drained
          await Promise.all(rows.map(handler));
          const res = await pool.query(remove, [rows.map((r: { id: string }) => r.id)]);
          deleted += res.rowCount ?? 0;
        }
      };
      c.t0 = now();
      await Promise.all(Array.from({ length: RAW_LOOPS }, loop));
      c.check('raw-pg');
      const [{ left }] = (await pool.query(`SELECT count(*)::int AS left FROM ${RAW_TABLE}`)).rows;
      if (deleted !== N || left !== 0) throw new Error(`raw-pg: deleted ${deleted}, left ${left}`);
      return { settings: { batch: RAW_BATCH, loops: RAW_LOOPS, pool: RAW_LOOPS + 1 } };
    },
  );
}

// ---------------------------------------------------------------------------------------------
// our statements in the raw loop (PostgreSQL)

async function stmtPg(c: Counter): Promise<Extra> {
  const ds = await openDataSource('postgres');
  await dropOutboxTables(ds);
  return withCleanup(
    async () => {
      await dropOutboxTables(ds);
      await ds.destroy();
    },
    async () => {
      const app = await createOurApp({ kind: 'typeorm', dataSource: ds }, { enabled: false });
      try {
        // N events for the loop plus CAPTURE for one real claim and ack.
        const CAPTURE = 7;
        for (let i = 0; i < N + CAPTURE; i += 500) {
          const count = Math.min(500, N + CAPTURE - i);
          await app.outbox.append(
            Array.from({ length: count }, (_, j) => ({
              type: EVENT_TYPE,
              key: null,
              payload: payload(i + j),
            })),
          );
        }
        const store = new stores.TypeOrmOutboxStore(ds, { tablePrefix: TABLE_PREFIX });
        const owner = 'stmt-pg';
        let claimed: Awaited<ReturnType<typeof store.claim>> = [];
        const [claimStmt] = await watchPrepared(ds, async () => {
          claimed = await store.claim({
            workerId: owner,
            handlers: [{ name: HANDLER_NAME, types: [EVENT_TYPE] }],
            limit: CAPTURE,
            leaseMs: 30_000,
          });
        });
        const [ackStmt] = await watchPrepared(ds, () => store.ackMany(claimed.map((d) => d.lease)));
        const token = claimed[0]?.lease.token;
        const tokenAt = claimStmt?.values.indexOf(token);
        const limitAt = claimStmt?.values.indexOf(CAPTURE);
        if (
          claimed.length !== CAPTURE ||
          !ackStmt ||
          tokenAt === undefined ||
          tokenAt < 0 ||
          limitAt === undefined ||
          limitAt < 0
        ) {
          throw new Error(
            'stmt-pg: could not find the claim and ack statements and their token / limit parameters',
          );
        }
        // The ack's second array holds one fence per lease, built from the token: the same
        // text with this claim's token in its place.
        const fenceOf = (t: string) => String((ackStmt.values[1] as string[])[0]).replace(token, t);

        const { Pool } = (ds.driver as unknown as { postgres: { Pool: new (o: object) => PgPool } })
          .postgres;
        const pool = new Pool({ ...PG, max: RAW_LOOPS + 1 });
        let acked = 0;
        const handler = async (_row: unknown) => c.hit();
        const loop = async () => {
          for (;;) {
            const fresh = randomUUID();
            const values = [...claimStmt.values];
            values[tokenAt] = fresh;
            values[limitAt] = RAW_BATCH;
            const { rows } = await pool.query({
              name: claimStmt.name,
              text: claimStmt.text,
              values,
            });
            if (rows.length === 0) return;
            await Promise.all(rows.map(handler));
            const ids = rows.map((r: { id: string }) => r.id);
            const fence = fenceOf(fresh);
            const res = await pool.query({
              name: ackStmt.name,
              text: ackStmt.text,
              values: [ids, ids.map(() => fence)],
            });
            acked += res.rowCount ?? 0;
          }
        };
        try {
          c.t0 = now();
          await Promise.all(Array.from({ length: RAW_LOOPS }, loop));
        } finally {
          await pool.end();
        }
        c.check('stmt-pg');
        const [{ left }] = await ds.query(
          `SELECT count(*)::int AS left FROM ${TABLE_PREFIX}deliveries`,
        );
        if (acked !== N || left !== 0) throw new Error(`stmt-pg: acked ${acked}, left ${left}`);
        return {
          settings: {
            batch: RAW_BATCH,
            loops: RAW_LOOPS,
            pool: RAW_LOOPS + 1,
            statements: 'the library’s claim and ack (prepared)',
          },
        };
      } finally {
        await app.close();
      }
    },
  );
}

interface PgPool {
  query(config: {
    name: string;
    text: string;
    values: unknown[];
  }): Promise<{ rows: any[]; rowCount: number | null }>;
  end(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// raw Lua claim + ack on Redis

const RAW_KEYS = {
  pending: `{${RAW_REDIS_PREFIX}}:pending`, // zset id → seq
  leased: `{${RAW_REDIS_PREFIX}}:leased`, // zset id → lease deadline (ms, Redis clock)
  jobs: `{${RAW_REDIS_PREFIX}}:jobs`, // hash id → payload
};

const CLAIM_LUA = `
local popped = redis.call('ZPOPMIN', KEYS[1], ARGV[1])
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
local out = {}
for i = 1, #popped, 2 do
  local id = popped[i]
  redis.call('ZADD', KEYS[2], deadline, id)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[3], id)
end
return out`;

const ACK_LUA = `
local n = 0
for i = 1, #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    redis.call('HDEL', KEYS[2], ARGV[i])
    n = n + 1
  end
end
return n`;

async function rawLua(c: Counter): Promise<Extra> {
  const Redis = require('ioredis');
  const client = new Redis(REDIS_URL, { maxRetriesPerRequest: 3 });
  const pattern = `{${RAW_REDIS_PREFIX}}*`;
  await deleteRedisKeys(pattern);
  return withCleanup(
    async () => {
      await deleteRedisKeys(pattern);
      client.disconnect();
    },
    async () => {
      client.defineCommand('benchClaim', { numberOfKeys: 3, lua: CLAIM_LUA });
      client.defineCommand('benchAck', { numberOfKeys: 2, lua: ACK_LUA });
      for (let i = 0; i < N; i += 1000) {
        const size = Math.min(1000, N - i);
        const hash: string[] = [];
        const zset: Array<string | number> = [];
        for (let j = 0; j < size; j++) {
          const id = String(i + j + 1);
          hash.push(id, JSON.stringify(payload(i + j)));
          zset.push(i + j + 1, id);
        }
        await client
          .multi()
          .hset(RAW_KEYS.jobs, ...hash)
          .zadd(RAW_KEYS.pending, ...zset)
          .exec();
      }
      let acked = 0;
      const handler = async (_event: unknown) => c.hit();
      const loop = async () => {
        for (;;) {
          const flat: string[] = await client.benchClaim(
            RAW_KEYS.pending,
            RAW_KEYS.leased,
            RAW_KEYS.jobs,
            RAW_BATCH,
            30_000,
          );
          if (flat.length === 0) return;
          const ids: string[] = [];
          const events: unknown[] = [];
          for (let k = 0; k < flat.length; k += 2) {
            ids.push(flat[k]);
            events.push(JSON.parse(flat[k + 1]));
          }
          await Promise.all(events.map(handler));
          const n: number = await client.benchAck(RAW_KEYS.leased, RAW_KEYS.jobs, ...ids);
          if (n !== ids.length) throw new Error(`raw-lua: acked ${n}/${ids.length}`);
          acked += n;
        }
      };
      const redisBefore = await redisServerSnapshot();
      c.t0 = now();
      await Promise.all(Array.from({ length: RAW_LOOPS }, loop));
      const redis = await redisCost(redisBefore);
      c.check('raw-lua');
      const left = [
        await client.zcard(RAW_KEYS.pending),
        await client.zcard(RAW_KEYS.leased),
        await client.hlen(RAW_KEYS.jobs),
      ];
      if (acked !== N || left.some((x) => x !== 0)) {
        throw new Error(`raw-lua: acked ${acked}, left (pending, leased, jobs) ${left}`);
      }
      return {
        settings: { batch: RAW_BATCH, loops: RAW_LOOPS, connection: 'one ioredis client' },
        redis,
      };
    },
  );
}

// ---------------------------------------------------------------------------------------------
// pg-boss, graphile-worker, BullMQ

async function pgboss(c: Counter): Promise<Extra> {
  const ds = await openDataSource('postgres');
  await dropPgBossSchema((q) => ds.query(q));
  let boss: Awaited<ReturnType<typeof startPgBoss>> | null = null;
  return withCleanup(
    async () => {
      if (boss) await boss.stop({ graceful: true, wait: true, timeout: 10_000 });
      await dropPgBossSchema((q) => ds.query(q));
      await ds.destroy();
    },
    async () => {
      boss = await startPgBoss();
      await boss.createQueue(QUEUE);
      for (let i = 0; i < N; i += 1000) {
        const jobs = Array.from({ length: Math.min(1000, N - i) }, (_, j) => ({
          name: QUEUE,
          data: payload(i + j),
        }));
        await boss.insert(jobs);
      }
      c.t0 = now();
      for (let w = 0; w < PGBOSS_WORKERS; w++) {
        await boss.work(
          QUEUE,
          { batchSize: PGBOSS_BATCH, pollingIntervalSeconds: 0.5 },
          async (jobs) => {
            for (const _job of jobs) c.hit();
          },
        );
      }
      await c.wait('pgboss');
      await boss.stop({ graceful: true, wait: true, timeout: 10_000 });
      boss = null;
      c.check('pgboss');
      const [{ left }] = await ds.query(
        `SELECT count(*)::int AS left FROM ${PGBOSS_SCHEMA}.job WHERE name = $1 AND state <> 'completed'`,
        [QUEUE],
      );
      if (left !== 0) throw new Error(`pgboss: ${left} jobs not completed`);
      return {
        settings: {
          workers: PGBOSS_WORKERS,
          batchSize: PGBOSS_BATCH,
          pollingIntervalSeconds: 0.5,
          note: 'each worker handles its batch one job at a time',
        },
      };
    },
  );
}

async function graphile(c: Counter, perJob = GRAPHILE_BATCH, local = false): Promise<Extra> {
  const gw = graphileWorker();
  const ds = await openDataSource('postgres');
  await dropGraphileSchema((q) => ds.query(q));
  let runner: Awaited<ReturnType<typeof gw.run>> | null = null;
  return withCleanup(
    async () => {
      if (runner) await runner.stop();
      await dropGraphileSchema((q) => ds.query(q));
      await ds.destroy();
    },
    async () => {
      const utils = await gw.makeWorkerUtils({ ...gw.options, logger: gw.quietLogger });
      try {
        await utils.migrate();
        const specs: Array<{ identifier: string; payload: unknown[] }> = [];
        for (let i = 0; i < N; i += perJob) {
          specs.push({
            identifier: QUEUE,
            payload: Array.from({ length: Math.min(perJob, N - i) }, (_, j) => payload(i + j)),
          });
        }
        for (let i = 0; i < specs.length; i += 100) await utils.addJobs(specs.slice(i, i + 100));
      } finally {
        await utils.release();
      }
      const handler = async (_event: unknown) => c.hit();
      c.t0 = now();
      runner = await gw.run({
        ...gw.options,
        logger: gw.quietLogger,
        concurrency: GRAPHILE_CONCURRENCY,
        noHandleSignals: true,
        // Its documented batching (worker.graphile.org/docs/performance#batching): jobs fetched
        // and locked 100 at a time, completions written together.
        ...(local
          ? { preset: { worker: { localQueue: { size: 100 }, completeJobBatchDelay: 0 } } }
          : {}),
        taskList: {
          // A batch job: the payload is the array; resolving means every entry succeeded.
          [QUEUE]: async (items: unknown) => {
            await Promise.all((items as unknown[]).map(handler));
          },
        },
      });
      await c.wait('graphile');
      await runner.stop();
      runner = null;
      c.check('graphile');
      // The last jobs' completions may still be on their way after stop() (graphile-worker
      // batches them): wait for them (bounded) before checking nothing is left. Not timed.
      let left = -1;
      for (let tries = 0; tries < 50 && left !== 0; tries++) {
        if (tries > 0) await new Promise((resolve) => setTimeout(resolve, 100));
        [{ left }] = await ds.query(
          `SELECT count(*)::int AS left FROM ${gw.options.schema}._private_jobs`,
        );
      }
      if (left !== 0) throw new Error(`graphile: ${left} jobs left`);
      return {
        settings: {
          concurrency: GRAPHILE_CONCURRENCY,
          jobs: Math.ceil(N / perJob),
          eventsPerJob: perJob,
          note: local
            ? 'batch jobs (payload = array of events), localQueue 100, completeJobBatchDelay 0'
            : 'batch jobs (payload = array of events), defaults otherwise',
        },
      };
    },
  );
}

async function bull(c: Counter): Promise<Extra> {
  const { Queue, Worker } = bullmq();
  await deleteRedisKeys(`${BULL_PREFIX}:*`);
  const connection = bullConnection();
  const queue = new Queue(QUEUE, { connection, prefix: BULL_PREFIX });
  let worker: any = null;
  return withCleanup(
    async () => {
      if (worker) await worker.close();
      await queue.obliterate({ force: true });
      await queue.close();
      await deleteRedisKeys(`${BULL_PREFIX}:*`);
    },
    async () => {
      for (let i = 0; i < N; i += 1000) {
        await queue.addBulk(
          Array.from({ length: Math.min(1000, N - i) }, (_, j) => ({
            name: EVENT_TYPE,
            data: payload(i + j),
          })),
        );
      }
      const redisBefore = await redisServerSnapshot();
      c.t0 = now();
      worker = new Worker(QUEUE, async () => c.hit(), {
        connection,
        prefix: BULL_PREFIX,
        concurrency: BULLMQ_CONCURRENCY,
      });
      await c.wait('bullmq');
      await worker.close();
      worker = null;
      const redis = await redisCost(redisBefore);
      c.check('bullmq');
      const counts = await queue.getJobCounts('completed', 'waiting', 'active', 'failed');
      if (counts.completed !== N) throw new Error(`bullmq: job counts ${JSON.stringify(counts)}`);
      return {
        settings: {
          concurrency: BULLMQ_CONCURRENCY,
          options: 'defaults (removeOnComplete: false)',
        },
        redis,
      };
    },
  );
}

// ---------------------------------------------------------------------------------------------

runMain(async () => {
  const { variant, round } = args();
  const c = new Counter();
  let extra: Extra;
  const m = /^ours-([a-z]+)-([a-z]+)$/.exec(variant);
  if (variant === 'ours-pg-history') extra = await ours(c, 'pg', HISTORY_CONFIG, true);
  // The same preparation (VACUUM ANALYZE, CHECKPOINT) with no history: the history's own baseline.
  else if (variant === 'ours-pg-history-empty')
    extra = await ours(c, 'pg', HISTORY_CONFIG, true, 0);
  else if (m) extra = await ours(c, m[1], m[2], false);
  else if (variant === 'raw-pg') extra = await rawPg(c);
  else if (variant === 'stmt-pg') extra = await stmtPg(c);
  else if (variant === 'raw-lua') extra = await rawLua(c);
  else if (variant === 'pgboss') extra = await pgboss(c);
  else if (variant === 'graphile') extra = await graphile(c);
  else if (/^graphile-[1-9][0-9]*(-local)?$/.test(variant))
    extra = await graphile(c, parseInt(variant.slice(9), 10), variant.endsWith('-local'));
  else if (variant === 'bullmq') extra = await bull(c);
  else throw new Error(`unknown variant ${variant}`);
  const ms = c.t1 - c.t0;
  if (!(ms > 0)) throw new Error(`${variant}: bad timing t0=${c.t0} t1=${c.t1}`);
  emit({
    scenario: 'dispatch',
    variant,
    round,
    n: N,
    ms,
    eventsPerSec: (N / ms) * 1000,
    // µs of this process's CPU per event from t0 to the N-th handler call = ms per 1,000 events.
    nodeCpuMsPer1000: c.cpu1 ? +((c.cpu1.user + c.cpu1.system) / N).toFixed(1) : null,
    // µs of PostgreSQL server CPU per event (the backends of the bench database; 10 ms ticks).
    ...(c.pg0 && c.pg1 && /pg|graphile|pgboss/.test(variant)
      ? { pgCpuUsPerEvent: +((cpuBetween(c.pg0, c.pg1) * 1000) / N).toFixed(1) }
      : {}),
    ...extra,
  });
});
