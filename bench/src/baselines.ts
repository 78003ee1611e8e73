/* The peers: pg-boss 10 (Node 20), graphile-worker 0.17 (the last for Node 20) and BullMQ 5. Loaded
   with require so the root typecheck and lint do not need bench/node_modules. */
import { GRAPHILE_SCHEMA, PG_URL, PGBOSS_SCHEMA, REDIS_URL } from './common';

export interface PgBossLike {
  start(): Promise<unknown>;
  stop(options?: Record<string, unknown>): Promise<void>;
  createQueue(name: string, options?: Record<string, unknown>): Promise<void>;
  send(name: string, data: object, options?: Record<string, unknown>): Promise<string | null>;
  insert(jobs: Array<{ name: string; data: object }>): Promise<void>;
  work(
    name: string,
    options: Record<string, unknown>,
    handler: (jobs: Array<{ id: string; data: any }>) => Promise<void>,
  ): Promise<string>;
  on(event: string, listener: (...a: any[]) => void): void;
}

/** pg-boss on its own schema, without maintenance or cron (kept out of the measurements). */
export async function startPgBoss(): Promise<PgBossLike> {
  const PgBoss = require('pg-boss');
  const boss: PgBossLike = new PgBoss({
    connectionString: PG_URL,
    schema: PGBOSS_SCHEMA,
    max: 10,
    supervise: false,
    schedule: false,
  });
  boss.on('error', (error) => console.error('pg-boss error', error));
  await boss.start();
  return boss;
}

export async function dropPgBossSchema(query: (sql: string) => Promise<unknown>): Promise<void> {
  await query(`DROP SCHEMA IF EXISTS ${PGBOSS_SCHEMA} CASCADE`);
}

export function bullConnection(): Record<string, unknown> {
  const url = new URL(REDIS_URL);
  return { host: url.hostname, port: Number(url.port || 6379), maxRetriesPerRequest: null };
}

export function bullmq(): {
  Queue: new (name: string, options: Record<string, unknown>) => any;
  Worker: new (
    name: string,
    processor: (job: { id?: string; data: any }) => Promise<unknown>,
    options: Record<string, unknown>,
  ) => any;
} {
  return require('bullmq');
}

export interface GraphileRunner {
  stop(): Promise<void>;
  promise: Promise<void>;
}

export interface GraphileUtils {
  addJobs(specs: ReadonlyArray<{ identifier: string; payload: unknown }>): Promise<unknown[]>;
  migrate(): Promise<void>;
  release(): Promise<void>;
}

/** graphile-worker's API as the dispatch scenario uses it (`run`, `makeWorkerUtils`, a silent logger). */
export function graphileWorker(): {
  run(options: Record<string, unknown>): Promise<GraphileRunner>;
  makeWorkerUtils(options: Record<string, unknown>): Promise<GraphileUtils>;
  quietLogger: unknown;
  options: { connectionString: string; schema: string };
} {
  const gw = require('graphile-worker');
  // Errors still reach stderr; info/debug (one line per job) would distort the measurement.
  const quietLogger = new gw.Logger(
    () => (level: string, message: string) =>
      level === 'error' ? console.error(`graphile-worker: ${message}`) : undefined,
  );
  return {
    run: gw.run,
    makeWorkerUtils: gw.makeWorkerUtils,
    quietLogger,
    options: { connectionString: PG_URL, schema: GRAPHILE_SCHEMA },
  };
}

export async function dropGraphileSchema(query: (sql: string) => Promise<unknown>): Promise<void> {
  await query(`DROP SCHEMA IF EXISTS ${GRAPHILE_SCHEMA} CASCADE`);
}
