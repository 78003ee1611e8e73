/* The peers: pg-boss 10 (Node 20) and BullMQ 5. Loaded with require so the root typecheck and
   lint do not need bench/node_modules. */
import { PG_URL, PGBOSS_SCHEMA, REDIS_URL } from './common';

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
