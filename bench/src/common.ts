/* Shared helpers of the benchmark scenarios: connections, cleanup, timing, result output. */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { DataSource } from 'typeorm';

/** Only local services (127.0.0.1); overridable for another local port. */
export const PG = {
  host: process.env.BENCH_PGHOST ?? '127.0.0.1',
  port: Number(process.env.BENCH_PGPORT ?? 5432),
  user: process.env.BENCH_PGUSER ?? 'postgres',
  database: process.env.BENCH_PGDATABASE ?? 'test',
};
export const PG_URL = `postgres://${PG.user}@${PG.host}:${PG.port}/${PG.database}`;
export const MARIA = {
  host: process.env.BENCH_MYSQL_HOST ?? '127.0.0.1',
  port: Number(process.env.BENCH_MYSQL_PORT ?? 3306),
  user: 'root',
  database: process.env.BENCH_MYSQL_DATABASE ?? 'test',
};
export const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** Every name the benchmark creates starts with one of these, so cleanup never touches others. */
export const TABLE_PREFIX = 'bench_ob_';
export const BUSINESS_TABLE = 'bench_orders';
export const HANDROLLED_TABLE = 'bench_handrolled_outbox';
export const PGBOSS_SCHEMA = 'bench_pgboss';
export const OUR_REDIS_PREFIX = 'bench-outbox';
export const BULL_PREFIX = 'bench-bull';
/** Dispatch scenario baselines: the raw SQL outbox table, graphile-worker's schema, raw Lua keys. */
export const RAW_TABLE = 'bench_raw_outbox';
export const GRAPHILE_SCHEMA = 'bench_graphile';
export const RAW_REDIS_PREFIX = 'bench-raw';
/** Wake-up scenario: its own tables and keys (two processes share them). */
export const WAKE_TABLE_PREFIX = 'bench_wk_';
export const WAKE_REDIS_PREFIX = 'bench-wake';
export const SQLITE_FILE = join(tmpdir(), `nestjs-outbox-bench-${process.pid}.sqlite`);

export type SqlKind = 'postgres' | 'mariadb' | 'sqlite' | 'sqlite-wal';

export async function openDataSource(kind: SqlKind): Promise<DataSource> {
  const ds =
    kind === 'postgres'
      ? new DataSource({
          type: 'postgres',
          host: PG.host,
          port: PG.port,
          username: PG.user,
          database: PG.database,
          extra: { max: 10 },
        })
      : kind === 'mariadb'
        ? new DataSource({
            type: 'mariadb',
            host: MARIA.host,
            port: MARIA.port,
            username: MARIA.user,
            password: '',
            database: MARIA.database,
            extra: { connectionLimit: 10 },
          })
        : new DataSource({
            type: 'better-sqlite3',
            database: SQLITE_FILE,
            // TypeORM's default is the rollback journal (an fsync'd commit per write statement).
            enableWAL: kind === 'sqlite-wal',
          });
  return ds.initialize();
}

/**
 * Drops every table whose name starts with the benchmark prefix (the store recreates its tables at
 * bootstrap). Listed from the catalog rather than named here, so tables a newer schema adds (for
 * example `<prefix>dead_letters`) go too; nothing outside the prefix is touched.
 */
export async function dropOutboxTables(ds: DataSource, prefix = TABLE_PREFIX): Promise<void> {
  const type = ds.options.type;
  const listed: Array<{ name: string }> =
    type === 'postgres'
      ? await ds.query(
          `SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema()`,
        )
      : type === 'mariadb' || type === 'mysql'
        ? await ds.query(
            `SELECT table_name AS name FROM information_schema.tables WHERE table_schema = database()`,
          )
        : await ds.query(`SELECT name FROM sqlite_master WHERE type = 'table'`);
  const tables = listed.map((r) => String(r.name)).filter((n) => n.startsWith(prefix));
  if (tables.length === 0) return;
  if (type === 'postgres') {
    await ds.query(`DROP TABLE IF EXISTS ${tables.join(', ')} CASCADE`);
    return;
  }
  // MariaDB/SQLite: one connection, foreign keys off while the prefix's tables go.
  const qr = ds.createQueryRunner();
  try {
    const isMaria = type === 'mariadb' || type === 'mysql';
    await qr.query(isMaria ? 'SET FOREIGN_KEY_CHECKS = 0' : 'PRAGMA foreign_keys = OFF');
    for (const t of tables) await qr.query(`DROP TABLE IF EXISTS ${t}`);
    await qr.query(isMaria ? 'SET FOREIGN_KEY_CHECKS = 1' : 'PRAGMA foreign_keys = ON');
  } finally {
    await qr.release();
  }
}

export function removeSqliteFile(): void {
  for (const suffix of ['', '-wal', '-shm', '-journal']) {
    rmSync(`${SQLITE_FILE}${suffix}`, { force: true });
  }
}

/** Deletes every Redis key under a prefix (SCAN, never KEYS/FLUSHDB: the server is shared). */
export async function deleteRedisKeys(pattern: string): Promise<number> {
  const Redis = require('ioredis');
  const client = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 3 });
  await client.connect();
  let cursor = '0';
  let deleted = 0;
  try {
    do {
      const [next, keys]: [string, string[]] = await client.scan(
        cursor,
        'MATCH',
        pattern,
        'COUNT',
        1000,
      );
      cursor = next;
      if (keys.length > 0) deleted += await client.unlink(...keys);
    } while (cursor !== '0');
  } finally {
    client.disconnect();
  }
  return deleted;
}

export function now(): number {
  return performance.now();
}

/**
 * Milliseconds on the host's monotonic clock (`process.hrtime`), the same in every process of the
 * machine: for times compared across processes. `performance.timeOrigin + performance.now()` is
 * not: each process reads its wall-clock origin once at start, apart from performance.now()'s
 * zero, and one preempted in between (a busy machine) reads late by that much, up to 140 ms here.
 */
export function hostNow(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Resolves when `count()` reaches `target`, rejects after `timeoutMs`. */
export function waitFor(
  count: () => number,
  target: number,
  timeoutMs: number,
  what: string,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const tick = () => {
      if (count() >= target) return resolve();
      if (Date.now() - started > timeoutMs) {
        return reject(new Error(`${what}: ${count()}/${target} after ${timeoutMs} ms`));
      }
      setTimeout(tick, 2);
    };
    tick();
  });
}

export function quantile(values: number[], q: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

export function median(values: number[]): number {
  return quantile(values, 0.5);
}

/** The line the orchestrator reads from a variant's stdout. */
export const RESULT_MARK = 'BENCH_RESULT ';

export function emit(result: Record<string, unknown>): void {
  process.stdout.write(`${RESULT_MARK}${JSON.stringify(result)}\n`);
}

/** `node ... scenario.ts <variant> [round]` */
export function args(): { variant: string; round: number } {
  const variant = process.argv[2];
  if (!variant) throw new Error('usage: <scenario>.ts <variant> [round]');
  return { variant, round: Number(process.argv[3] ?? 1) };
}

/** Runs a variant's main and exits with its status (open handles must not keep it alive). */
export function runMain(main: () => Promise<void>): void {
  const hardLimit = setTimeout(
    () => {
      console.error('variant exceeded its hard time limit');
      process.exit(3);
    },
    Number(process.env.BENCH_VARIANT_TIMEOUT_MS ?? 150_000),
  );
  hardLimit.unref();
  main().then(
    () => process.exit(0),
    (error) => {
      console.error(error);
      process.exit(1);
    },
  );
}

export function envInt(name: string, fallback: number): number {
  const v = process.env[name];
  return v === undefined || v === '' ? fallback : Number(v);
}

/**
 * `count` unkeyed order events for one handler, numbered from `from`: the backlog the store-level
 * benches (store-cost, store-pair, dispatch-stmts) append in chunks before they claim.
 */
export function orderEvents(
  handler: { name: string; types: string[] },
  from: number,
  count: number,
): {
  id: string;
  type: string;
  key: null;
  payload: Record<string, unknown>;
  headers: Record<string, string>;
  occurredAt: Date;
  availableAt: null;
  handlers: string[];
}[] {
  return Array.from({ length: count }, (_, j) => ({
    id: randomUUID(),
    type: handler.types[0],
    key: null,
    payload: { orderId: randomUUID(), total: from + j, lines: [{ sku: 'A-1', qty: 1 }] },
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers: [handler.name],
  }));
}

/** Server-side totals of the Redis at REDIS_URL: commands run, µs spent in them, CPU seconds. */
export interface RedisServerSnapshot {
  calls: number;
  usec: number;
  cpuSec: number;
  byCommand: Record<string, { calls: number; usec: number }>;
}

/**
 * `INFO commandstats` and `INFO cpu` of the Redis at REDIS_URL (the `info` calls themselves are left
 * out). Server-wide: on a Redis shared with other clients the deltas include their work, so point
 * BENCH_REDIS_URL at a Redis of the benchmark's own to read them per event (see RESULTS.md).
 */
export async function redisServerSnapshot(): Promise<RedisServerSnapshot> {
  const Redis = require('ioredis');
  const client = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 3 });
  await client.connect();
  try {
    const text: string = await client.info('commandstats');
    const cpu: string = await client.info('cpu');
    const snap: RedisServerSnapshot = { calls: 0, usec: 0, cpuSec: 0, byCommand: {} };
    for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
      if (m[1] === 'info') continue;
      const entry = { calls: Number(m[2]), usec: Number(m[3]) };
      snap.byCommand[m[1]] = entry;
      snap.calls += entry.calls;
      snap.usec += entry.usec;
    }
    for (const m of cpu.matchAll(/^used_cpu_(?:sys|user):([\d.]+)/gm)) snap.cpuSec += Number(m[1]);
    return snap;
  } finally {
    client.disconnect();
  }
}

/** Per-event Redis cost between two snapshots: commands, µs in commands, ms of server CPU per 1,000. */
export function redisCostPerEvent(
  a: RedisServerSnapshot,
  b: RedisServerSnapshot,
  events: number,
): Record<string, unknown> {
  const byCommand: Record<string, { callsPerEvent: number; usPerEvent: number }> = {};
  for (const [name, e] of Object.entries(b.byCommand)) {
    const before = a.byCommand[name] ?? { calls: 0, usec: 0 };
    const calls = e.calls - before.calls;
    if (calls <= 0) continue;
    byCommand[name] = {
      callsPerEvent: +(calls / events).toFixed(4),
      usPerEvent: +((e.usec - before.usec) / events).toFixed(2),
    };
  }
  // Commands a script runs are counted on their own and inside the script's time too: the script
  // time is EVAL/EVALSHA's; `callsPerEvent` counts every command, those inside scripts included.
  const scripts = ['evalsha', 'eval', 'fcall'].reduce(
    (sum, name) => sum + (b.byCommand[name]?.usec ?? 0) - (a.byCommand[name]?.usec ?? 0),
    0,
  );
  return {
    callsPerEvent: +((b.calls - a.calls) / events).toFixed(4),
    usPerEvent: +((b.usec - a.usec) / events).toFixed(2),
    scriptUsPerEvent: +(scripts / events).toFixed(2),
    cpuMsPer1000: +(((b.cpuSec - a.cpuSec) * 1e6) / events).toFixed(1),
    byCommand,
  };
}

/**
 * CPU time (ms, user + system) of each PostgreSQL backend connected to `database`, by pid, read
 * from /proc (the server runs on this machine): a backend's command line reads
 * `postgres: <cluster>: <user> <database> <client> <state>`. Empty where /proc is not readable.
 */
export function postgresBackendCpu(database: string): Map<number, number> {
  const out = new Map<number, number>();
  const { readdirSync, readFileSync } = require('node:fs') as typeof import('node:fs');
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p));
  } catch {
    return out;
  }
  const tick = 1000 / 100; // USER_HZ
  for (const pid of pids) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (!cmd.startsWith('postgres: ') || !cmd.split(' ').includes(database)) continue;
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.set(Number(pid), (Number(fields[11]) + Number(fields[12])) * tick);
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** CPU ms the backends spent between two `postgresBackendCpu` readings (new backends from 0). */
export function cpuBetween(before: Map<number, number>, after: Map<number, number>): number {
  let ms = 0;
  for (const [pid, t] of after) ms += t - (before.get(pid) ?? 0);
  return ms;
}

export interface SentStatement {
  name: string;
  text: string;
  values: unknown[];
}

/**
 * Runs `work` and returns the prepared statements the library sent meanwhile, in order (name,
 * text, values), watched on the `pg` Client class TypeORM loaded for `ds`.
 */
export async function watchPrepared(
  ds: DataSource,
  work: () => Promise<unknown>,
): Promise<SentStatement[]> {
  const Client = (
    ds.driver as unknown as { postgres: { Client: { prototype: { query: unknown } } } }
  ).postgres.Client;
  const query = Client.prototype.query as (...args: unknown[]) => unknown;
  const sent: SentStatement[] = [];
  Client.prototype.query = function (this: unknown, ...args: unknown[]) {
    const config = args[0] as Partial<SentStatement> | string;
    if (typeof config === 'object' && config.name?.startsWith('nestjs_outbox_')) {
      sent.push({ name: config.name, text: config.text!, values: [...(config.values ?? [])] });
    }
    return query.apply(this, args);
  };
  try {
    await work();
  } finally {
    Client.prototype.query = query;
  }
  return sent;
}

/**
 * Counts the statements sent through node-postgres (every `Client.prototype.query` call, whoever
 * makes it: the library, TypeORM, Drizzle, the scenario) from now until `stop()`, on both copies of
 * `pg` a scenario may load (bench/node_modules' and the root's). PostgreSQL's own counter
 * (pg_stat_statements) needs a server restart to load, which a shared server does not get.
 */
export function countStatements(): {
  count: () => number;
  /** How many of each statement, by its first 40 characters. */
  texts: () => Record<string, number>;
  stop: () => void;
} {
  // bench/node_modules may hold a `pg` of its own (graphile-worker's): patch it and the one
  // TypeORM loads from the root's node_modules, each once.
  const typeormDir = require('node:path').dirname(require.resolve('typeorm'));
  const modules = new Set(
    [require.resolve('pg'), require.resolve('pg', { paths: [typeormDir] })].map(
      (file) => (require(file) as { Client: { prototype: { query: unknown } } }).Client.prototype,
    ),
  );
  let n = 0;
  const texts: Record<string, number> = {};
  const restore: Array<() => void> = [];
  for (const proto of modules) {
    const query = proto.query as (...args: unknown[]) => unknown;
    proto.query = function (this: unknown, ...args: unknown[]) {
      n++;
      const config = args[0] as string | { text?: string };
      const text = (typeof config === 'string' ? config : (config?.text ?? '?')).slice(0, 40);
      texts[text] = (texts[text] ?? 0) + 1;
      return query.apply(this, args);
    };
    restore.push(() => (proto.query = query));
  }
  return { count: () => n, texts: () => texts, stop: () => restore.forEach((r) => r()) };
}

/**
 * CPU ms of this process's threads by thread name (`main` for the JavaScript thread; V8's
 * workers, libuv's pool, …), from /proc/self/task (empty where /proc is not readable): which
 * thread a process's CPU went to, e.g. the JavaScript thread against V8's compiler and GC helpers.
 */
export function threadCpu(): Map<string, number> {
  const out = new Map<string, number>();
  const { readdirSync, readFileSync } = require('node:fs') as typeof import('node:fs');
  let tids: string[];
  try {
    tids = readdirSync('/proc/self/task');
  } catch {
    return out;
  }
  const tick = 1000 / 100; // USER_HZ
  for (const tid of tids) {
    try {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      const name =
        Number(tid) === process.pid
          ? 'main'
          : stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.set(name, (out.get(name) ?? 0) + (Number(fields[11]) + Number(fields[12])) * tick);
    } catch {
      // gone meanwhile
    }
  }
  return out;
}
