/**
 * Chaos ledger driver: appends numbered `ledger.entry` events (spread over `keys` keys) while N
 * worker processes (chaos/worker.ts) consume them through `@Inbox()`, and injects faults:
 * SIGKILL + restart, SIGSTOP past the lease + SIGCONT, and (PostgreSQL) `pg_terminate_backend`
 * on the workers' connections. At the end it checks the ledger table: every event's effect applied
 * exactly once, none lost, and per key in append order.
 *
 *   npm run chaos -- --store postgres --workers 4 --events 5000 --seconds 60
 *
 * Uses the databases of the test suite's environment (PGDATABASE / MYSQL_DATABASE, default `test`)
 * under a unique table prefix (Redis: a unique key prefix) and drops everything it created.
 * Never restarts the database or Redis servers. Exit code 1 on any doubled, lost or out-of-order
 * effect (or an unfinished drain).
 */
import 'reflect-metadata';
import { ChildProcess, fork, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { randomBytes, randomUUID } from 'node:crypto';
import { join, resolve } from 'node:path';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import Redis from 'ioredis';
import { DataSource } from 'typeorm';
import { ensureInboxSchema } from '../lib/inbox';
import { OutboxModule } from '../lib/outbox.module';
import { OutboxService } from '../lib/outbox.service';
import { ensureOutboxSchema } from '../lib/stores/typeorm';
import { createDialect } from '../lib/stores/typeorm/dialects';
import {
  ChaosStore,
  chaosDataSourceOptions,
  LEDGER_TYPE,
  ledgerTable,
  quoteName,
  redisUrl,
  sqlDialectOf,
  WorkerReport,
} from './common';
import { LedgerConsumer } from './worker';

export interface ChaosOptions {
  store: ChaosStore;
  workers: number;
  events: number;
  /** Length of the fault phase; appends are spread over its first 70 %. */
  seconds: number;
  keys: number;
  leaseMs: number;
  /** SIGKILL + restart of a random worker this many times during the fault phase. */
  kills: number;
  /** SIGSTOP a worker for 2.5 × leaseMs, then SIGCONT, this many times. */
  stops: number;
  /** pg_terminate_backend on all workers' connections this many times (PostgreSQL / Redis runs). */
  terminates: number;
  /**
   * Redis runs: crash (SIGKILL) and restart the Redis server this many times. Needs a Redis of the
   * driver's own: with a value > 0 the driver starts `redis-server` on `ownRedisPort` with
   * `--appendonly yes --appendfsync always` in a temporary directory and removes it at the end.
   */
  redisRestarts: number;
  ownRedisPort: number;
  /** Upper bound for the drain after the fault phase. */
  drainTimeoutMs: number;
  log: (line: string) => void;
}

export interface ChaosResult {
  store: ChaosStore;
  prefix: string;
  appended: number;
  effects: number;
  appliedOnce: number;
  doubled: number;
  lost: number;
  orderViolations: number;
  faults: { kills: number; stops: number; terminated: number; redisRestarts: number };
  /** Deliveries skipped by the inbox because the effect had been applied (redeliveries, allowed). */
  duplicatesSkipped: number;
  /** Handler attempts that failed (killed connections, lock waits past lockTimeoutMs, ...). */
  failedAttempts: number;
  leaseLost: number;
  storeErrors: number;
  workerStarts: number;
  drainMs: number;
  totalMs: number;
  ok: boolean;
}

export const DEFAULTS: ChaosOptions = {
  store: 'postgres',
  workers: 4,
  events: 5000,
  seconds: 60,
  keys: 20,
  leaseMs: 2000,
  kills: 6,
  stops: 2,
  terminates: 2,
  redisRestarts: 0,
  ownRedisPort: 6390,
  drainTimeoutMs: 180_000,
  log: (line) => console.log(line),
};

const ROOT = resolve(__dirname, '..');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Slot {
  child: ChildProcess | null;
  stopped: boolean;
  /** Counters of the current incarnation, and the sum over finished ones. */
  current: WorkerReport | null;
  past: Omit<WorkerReport, 'op'>;
}

const ZERO = {
  claimed: 0,
  succeeded: 0,
  failed: 0,
  leaseLost: 0,
  storeErrors: 0,
  inboxProcessed: 0,
  inboxDuplicates: 0,
};

/** Children of every run in this process, killed on exit whatever happens. */
const LIVE = new Set<ChildProcess>();
let exitHookInstalled = false;

export function killAllWorkers(): void {
  for (const child of LIVE) {
    try {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
  LIVE.clear();
}

/** A Redis server of the driver's own (AOF, fsync always), so it can crash it without harm. */
class OwnRedis {
  private child: ChildProcess | null = null;

  private constructor(
    private readonly port: number,
    private readonly dir: string,
  ) {}

  static async start(port: number): Promise<OwnRedis> {
    const dir = mkdtempSync(join(tmpdir(), 'chaos-redis-'));
    const redis = new OwnRedis(port, dir);
    await redis.spawn();
    return redis;
  }

  private async spawn(): Promise<void> {
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--appendonly',
        'yes',
        '--appendfsync',
        'always',
        '--dir',
        this.dir,
        '--save',
        '',
      ],
      { stdio: 'ignore' },
    );
    LIVE.add(child);
    child.once('exit', () => LIVE.delete(child));
    this.child = child;
    const client = new Redis(redisUrl(String(this.port)), {
      lazyConnect: true,
      retryStrategy: () => 100,
    });
    client.on('error', () => undefined); // refused while the server starts
    try {
      for (let i = 0; ; i++) {
        try {
          if (client.status !== 'ready') await client.connect().catch(() => undefined);
          if ((await client.ping()) === 'PONG') break;
        } catch (error) {
          if (i > 100) throw error;
        }
        await sleep(100);
      }
    } finally {
      client.disconnect();
    }
  }

  /** SIGKILL (a crash: no shutdown save), then start again on the same AOF. */
  async restart(): Promise<void> {
    await this.kill();
    await sleep(500);
    await this.spawn();
  }

  private async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await gone;
  }

  async stop(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function addInto(sum: Omit<WorkerReport, 'op'>, r: WorkerReport | null): void {
  if (!r) return;
  for (const k of Object.keys(ZERO) as (keyof typeof ZERO)[]) sum[k] += r[k];
}

export async function runChaos(partial: Partial<ChaosOptions> = {}): Promise<ChaosResult> {
  const o: ChaosOptions = { ...DEFAULTS, ...partial };
  const started = Date.now();
  if (!exitHookInstalled) {
    process.on('exit', killAllWorkers);
    exitHookInstalled = true;
  }
  const dialect = sqlDialectOf(o.store);
  const prefix = `chaos_${o.store.slice(0, 2)}_${randomBytes(3).toString('hex')}_`;
  const appName = `chaos-${prefix}`;
  const ledger = ledgerTable(dialect, prefix);
  const dataSource = await new DataSource(chaosDataSourceOptions(dialect, 6)).initialize();
  let producer: Awaited<ReturnType<typeof NestFactory.createApplicationContext>> | null = null;
  const slots: Slot[] = [];
  let workerStarts = 0;
  const faults = { kills: 0, stops: 0, terminated: 0, redisRestarts: 0 };
  const ownRedis =
    o.store === 'redis' && o.redisRestarts > 0 ? await OwnRedis.start(o.ownRedisPort) : null;
  const redisPort = ownRedis ? String(o.ownRedisPort) : (process.env.REDIS_PORT ?? '6379');

  const startWorker = (slot: Slot): Promise<void> =>
    new Promise((ready, fail) => {
      const child = fork(join(__dirname, 'worker.ts'), [], {
        cwd: ROOT,
        // The test suite passes its cached transpile hook (same compile, faster start).
        execArgv: ['-r', process.env.CHAOS_TS_REGISTER ?? 'ts-node/register/transpile-only'],
        env: {
          ...process.env,
          TS_NODE_PROJECT: join(ROOT, 'tsconfig.json'),
          CHAOS_STORE: o.store,
          CHAOS_PREFIX: prefix,
          CHAOS_LEASE_MS: String(o.leaseMs),
          CHAOS_APP_NAME: appName,
          REDIS_PORT: redisPort,
        },
        stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      });
      LIVE.add(child);
      workerStarts++;
      slot.child = child;
      slot.stopped = false;
      let stderr = '';
      child.stderr?.on('data', (chunk) => (stderr = (stderr + chunk).slice(-4000)));
      const timer = setTimeout(
        () => fail(new Error(`worker did not start in 60 s: ${stderr}`)),
        60_000,
      );
      child.on('message', (m: WorkerReport | { op: 'ready' }) => {
        if (m.op === 'ready') {
          clearTimeout(timer);
          ready();
        } else if (m.op === 'stats' && slot.child === child) slot.current = m;
      });
      child.on('exit', (code, signal) => {
        clearTimeout(timer);
        LIVE.delete(child);
        if (slot.child === child) {
          addInto(slot.past, slot.current);
          slot.current = null;
          slot.child = null;
        }
        if (code && code !== 0 && !signal) o.log(`worker ${child.pid} exited ${code}: ${stderr}`);
        fail(new Error(`worker exited before ready (${code ?? signal}): ${stderr}`));
      });
    });

  const running = () => slots.filter((s) => s.child && !s.stopped);

  const kill = async () => {
    const slot = running()[Math.floor(Math.random() * running().length)];
    if (!slot?.child) return;
    const child = slot.child;
    const gone = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await gone;
    faults.kills++;
    await sleep(300);
    await startWorker(slot);
  };

  const stop = async () => {
    const slot = running()[Math.floor(Math.random() * running().length)];
    if (!slot?.child) return;
    slot.child.kill('SIGSTOP');
    slot.stopped = true;
    faults.stops++;
    await sleep(Math.round(o.leaseMs * 2.5));
    slot.child?.kill('SIGCONT');
    slot.stopped = false;
  };

  const terminate = async () => {
    if (dialect !== 'postgres') return;
    const rows: { ok: boolean }[] = await dataSource.query(
      'SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = $1',
      [appName],
    );
    faults.terminated += rows.filter((r) => r.ok).length;
  };

  try {
    // Schema: ledger (effects in apply order), inbox, outbox.
    const serial = dialect === 'postgres' ? 'BIGSERIAL' : 'BIGINT AUTO_INCREMENT';
    await dataSource.query(
      `CREATE TABLE ${ledger} (id ${serial} PRIMARY KEY, event_id VARCHAR(36) NOT NULL, ` +
        `seq INT NOT NULL, k VARCHAR(32) NOT NULL, worker VARCHAR(32) NOT NULL)`,
    );
    await ensureInboxSchema(dataSource, { tablePrefix: prefix });
    if (o.store !== 'redis') await ensureOutboxSchema(dataSource, { tablePrefix: prefix });

    // The producer: dispatcher off, the same handler registered so deliveries are written at append.
    @Module({
      imports: [
        OutboxModule.forRoot({
          store:
            o.store === 'redis'
              ? {
                  type: 'redis',
                  url: redisUrl(redisPort),
                  prefix,
                  redisOptions: { maxRetriesPerRequest: null },
                }
              : { type: 'typeorm', dataSource, tablePrefix: prefix, ensureSchema: false },
          dispatcher: { enabled: false },
          retention: { cleanupIntervalMs: 0 },
          inbox: { dataSource, tablePrefix: prefix, cleanupIntervalMs: 0 },
        }),
      ],
      providers: [LedgerConsumer],
    })
    class ProducerModule {}
    producer = await NestFactory.createApplicationContext(ProducerModule, { logger: false });
    const outbox = producer.get(OutboxService);

    for (let i = 0; i < o.workers; i++)
      slots.push({ child: null, stopped: false, current: null, past: { ...ZERO } });
    await Promise.all(slots.map(startWorker));
    o.log(`chaos ${o.store}: ${o.workers} workers up (prefix ${prefix})`);

    // Appends, spread over the first 70 % of the fault phase, in batches of up to 25.
    const phaseStart = Date.now();
    const phaseMs = o.seconds * 1000;
    const appendMs = phaseMs * 0.7;
    let appended = 0;
    const appending = (async () => {
      const batch = 25;
      const batches = Math.ceil(o.events / batch);
      for (let b = 0; b < batches; b++) {
        const events = [];
        for (let j = 0; j < batch && appended + j < o.events; j++) {
          const seq = appended + j + 1;
          const key = `k${seq % o.keys}`;
          events.push({ id: randomUUID(), type: LEDGER_TYPE, key, payload: { seq, key } });
        }
        for (let attempt = 1; ; attempt++) {
          try {
            await outbox.append(events);
            break;
          } catch (error) {
            if (attempt >= 20) throw error;
            await sleep(250);
          }
        }
        appended += events.length;
        const due = phaseStart + ((b + 1) / batches) * appendMs;
        if (due > Date.now()) await sleep(due - Date.now());
      }
    })();

    // Faults at evenly spaced moments of the phase, in a shuffled order.
    const plan: (() => Promise<void>)[] = [
      ...Array.from({ length: o.kills }, () => kill),
      ...Array.from({ length: o.stops }, () => stop),
      ...(dialect === 'postgres' ? Array.from({ length: o.terminates }, () => terminate) : []),
      ...(ownRedis
        ? Array.from({ length: o.redisRestarts }, () => async () => {
            await ownRedis.restart();
            faults.redisRestarts++;
          })
        : []),
    ].sort(() => Math.random() - 0.5);
    for (let i = 0; i < plan.length; i++) {
      const due = phaseStart + ((i + 1) / (plan.length + 1)) * phaseMs;
      if (due > Date.now()) await sleep(due - Date.now());
      await plan[i]();
    }
    await appending;
    const rest = phaseStart + phaseMs - Date.now();
    if (rest > 0) await sleep(rest);

    // Drain: every worker running, wait until every event has its effect (bounded).
    for (const slot of slots) {
      if (slot.stopped) slot.child?.kill('SIGCONT');
      slot.stopped = false;
      if (!slot.child) await startWorker(slot);
    }
    const drainStart = Date.now();
    const countSql = `SELECT COUNT(DISTINCT event_id) AS n FROM ${ledger}`;
    for (;;) {
      const [{ n }] = await dataSource.query(countSql);
      if (Number(n) >= appended) break;
      if (Date.now() - drainStart > o.drainTimeoutMs) {
        o.log(`chaos ${o.store}: drain timed out at ${n}/${appended}`);
        break;
      }
      await sleep(250);
    }
    const drainMs = Date.now() - drainStart;
    // Let late redeliveries (leases of the last faults) run before counting.
    await sleep(o.leaseMs * 2);

    await stopWorkers(slots);
    const sums = { ...ZERO };
    for (const slot of slots) addInto(sums, { op: 'stats', ...slot.past });

    const rows: { event_id: string; seq: number | string; k: string }[] = await dataSource.query(
      `SELECT event_id, seq, k FROM ${ledger} ORDER BY id`,
    );
    const perSeq = new Map<number, number>();
    const lastPerKey = new Map<string, number>();
    let orderViolations = 0;
    for (const row of rows) {
      const seq = Number(row.seq);
      perSeq.set(seq, (perSeq.get(seq) ?? 0) + 1);
      const last = lastPerKey.get(row.k) ?? 0;
      if (seq <= last) orderViolations++;
      else lastPerKey.set(row.k, seq);
    }
    let doubled = 0;
    let lost = 0;
    let appliedOnce = 0;
    for (let seq = 1; seq <= appended; seq++) {
      const n = perSeq.get(seq) ?? 0;
      if (n === 0) lost++;
      else if (n === 1) appliedOnce++;
      else doubled += n - 1;
    }
    const result: ChaosResult = {
      store: o.store,
      prefix,
      appended,
      effects: rows.length,
      appliedOnce,
      doubled,
      lost,
      orderViolations,
      faults,
      duplicatesSkipped: sums.inboxDuplicates,
      failedAttempts: sums.failed,
      leaseLost: sums.leaseLost,
      storeErrors: sums.storeErrors,
      workerStarts,
      drainMs,
      totalMs: Date.now() - started,
      ok: doubled === 0 && lost === 0 && orderViolations === 0 && appended === o.events,
    };
    return result;
  } finally {
    await stopWorkers(slots).catch(() => undefined);
    killAllWorkers();
    await producer?.close().catch(() => undefined);
    // An own Redis is deleted whole (and killAllWorkers has stopped it already).
    await cleanup(ownRedis ? 'own-redis' : o.store, dialect, dataSource, prefix, redisPort).catch(
      (e) => o.log(`cleanup failed: ${e}`),
    );
    await ownRedis?.stop();
    await dataSource.destroy().catch(() => undefined);
  }
}

async function stopWorkers(slots: Slot[]): Promise<void> {
  await Promise.all(
    slots.map(async (slot) => {
      const child = slot.child;
      if (!child) return;
      const gone = new Promise((r) => child.once('exit', r));
      child.kill('SIGCONT');
      if (child.connected) child.send({ op: 'exit' });
      const timer = setTimeout(() => child.kill('SIGKILL'), 8_000);
      await gone;
      clearTimeout(timer);
    }),
  );
}

async function cleanup(
  store: ChaosStore | 'own-redis',
  dialect: 'postgres' | 'mariadb',
  dataSource: DataSource,
  prefix: string,
  redisPort: string,
): Promise<void> {
  await dataSource.query(`DROP TABLE IF EXISTS ${ledgerTable(dialect, prefix)}`);
  await dataSource.query(`DROP TABLE IF EXISTS ${quoteName(dialect, `${prefix}inbox`)}`);
  if (store === 'own-redis') return;
  if (store !== 'redis') {
    for (const ddl of createDialect(dataSource, { tablePrefix: prefix }).dropSchema()) {
      await dataSource.query(ddl);
    }
    return;
  }
  const client = new Redis(redisUrl(redisPort));
  try {
    let cursor = '0';
    do {
      const [next, keys] = await client.scan(cursor, 'MATCH', `{${prefix}}:*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length) await client.del(...keys);
    } while (cursor !== '0');
  } finally {
    await client.quit();
  }
}

export function summaryLine(r: ChaosResult): string {
  return (
    `CHAOS ${r.ok ? 'OK' : 'FAIL'} store=${r.store} appended=${r.appended} ` +
    `applied_once=${r.appliedOnce} doubled=${r.doubled} lost=${r.lost} ` +
    `order_violations=${r.orderViolations} redelivered_skipped=${r.duplicatesSkipped} ` +
    `failed_attempts=${r.failedAttempts} lease_lost=${r.leaseLost} store_errors=${r.storeErrors} ` +
    `kills=${r.faults.kills} stops=${r.faults.stops} terminated_conns=${r.faults.terminated} ` +
    `redis_restarts=${r.faults.redisRestarts} ` +
    `worker_starts=${r.workerStarts} drain_ms=${r.drainMs} total_ms=${r.totalMs}`
  );
}

function parseArgs(argv: string[]): Partial<ChaosOptions> & { stores: ChaosStore[] } {
  const out: Partial<ChaosOptions> & { stores: ChaosStore[] } = { stores: [] };
  const num = [
    'workers',
    'events',
    'seconds',
    'keys',
    'leaseMs',
    'kills',
    'stops',
    'terminates',
    'redisRestarts',
    'ownRedisPort',
  ];
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i]
      .replace(/^--/, '')
      .replace(/-([a-z])/g, (_m, c: string) => c.toUpperCase());
    const value = argv[++i];
    if (value === undefined) throw new Error(`missing value for ${argv[i - 1]}`);
    if (name === 'store') out.stores.push(...(value.split(',') as ChaosStore[]));
    else if (num.includes(name)) (out as unknown as Record<string, number>)[name] = Number(value);
    else throw new Error(`unknown option ${argv[i - 1]}`);
  }
  if (out.stores.length === 0) out.stores.push('postgres');
  return out;
}

async function main(): Promise<void> {
  const { stores, ...options } = parseArgs(process.argv.slice(2));
  const stop = () => {
    killAllWorkers();
    process.exit(130);
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  let failed = false;
  for (const store of stores) {
    const result = await runChaos({ ...options, store });
    console.log(JSON.stringify(result));
    console.log(summaryLine(result));
    failed ||= !result.ok;
  }
  process.exit(failed ? 1 : 0);
}

if (require.main === module) {
  main().catch((error) => {
    console.error(error);
    killAllWorkers();
    process.exit(2);
  });
}
