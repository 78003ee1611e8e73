import type { DataSource } from 'typeorm';
import type { SqlExecutor } from '../../../executors/sql-executor';
import { createDialect } from '../dialects';
import { Plan, SqlDialect } from '../dialects/sql-dialect';
import { raw, sql } from '../sql';
import { OutboxTableOptions } from './tables';

/**
 * Version of the outbox tables this release expects. 2: `deliveries` holds open work only,
 * dead letters live in `dead_letters`, events carry an `available_at` index for retention.
 * 3: on MySQL/MariaDB, types, keys and handler names use a NO PAD binary collation, so `'a'` and
 * `'a '` are two keys (other databases: no change).
 */
export const OUTBOX_SCHEMA_VERSION = 3;

/** Seconds `ensureOutboxSchema` waits for another replica, or a lock on the tables. */
const SCHEMA_LOCK_SECONDS = 60;

/**
 * Brings the tables to the current version inside an open transaction: creates what is missing,
 * upgrades older tables (every step, each idempotent), records the version. Idempotent.
 */
export function* applySchema(dialect: SqlDialect): Plan<void> {
  if (dialect.inspectServer) yield* dialect.inspectServer();
  for (const ddl of dialect.createSchema()) yield raw(ddl);
  const { rows } = yield sql`SELECT MAX(version) AS version FROM ${dialect.tables.version}`;
  const found = rows[0]?.version;
  const current = found === null || found === undefined ? null : Number(found);
  if (current !== null && current >= OUTBOX_SCHEMA_VERSION) return;
  if (current !== null) {
    for (const step of dialect.upgradeSchema()) {
      try {
        yield raw(step);
      } catch (error) {
        if (!dialect.isRedundantDdl(error)) throw error;
      }
    }
  }
  yield sql`INSERT INTO ${dialect.tables.version} (version, applied_at) VALUES (${OUTBOX_SCHEMA_VERSION}, ${dialect.now})`;
}

/**
 * Creates (or upgrades) the outbox tables if needed, for development and tests. Tables already at
 * the current version cost one read and take no lock, so a replica starting while others write
 * never queues behind their transactions. Otherwise replicas serialize on a PostgreSQL advisory
 * lock / MySQL `GET_LOCK` (SQLite: an immediate transaction), and on PostgreSQL a DDL lock that
 * cannot be had within 60 s fails with a message instead of hanging. Production deployments
 * usually run the migration instead.
 */
export async function ensureOutboxSchema(
  dataSource: DataSource | SqlExecutor,
  options: OutboxTableOptions = {},
): Promise<void> {
  const dialect = createDialect(dataSource, options);
  const status = await readVersion(dialect);
  if (status !== null && status >= OUTBOX_SCHEMA_VERSION) return;
  const lockName = `${dialect.tables.lockName}:schema`;
  try {
    await dialect.run(
      function* (): Plan<void> {
        yield dialect.lock(lockName, SCHEMA_LOCK_SECONDS);
        const unlock = dialect.unlock(lockName);
        try {
          const bound = dialect.lockTimeout(SCHEMA_LOCK_SECONDS);
          if (bound) yield bound;
          yield* applySchema(dialect);
        } finally {
          if (unlock) yield unlock;
        }
      },
      { transaction: true },
    );
  } catch (error) {
    if (!dialect.isLockTimeout(error)) throw error;
    throw new Error(
      `nestjs-outbox: could not create or upgrade the outbox tables (${dialect.tables.prefix}*) within ${SCHEMA_LOCK_SECONDS} s: ` +
        'an open transaction holds a lock on them. Let it finish, or create the tables ahead of time ' +
        '(npx nestjs-outbox schema migrate, or the TypeORM migration) and set ensureSchema: false.',
      { cause: error },
    );
  }
}

async function readVersion(dialect: SqlDialect): Promise<number | null> {
  try {
    return await dialect.run(function* (): Plan<number | null> {
      const { rows } = yield sql`SELECT MAX(version) AS version FROM ${dialect.tables.version}`;
      const v = rows[0]?.version;
      return v === null || v === undefined ? null : Number(v);
    });
  } catch {
    return null;
  }
}

export interface OutboxSchemaStatus {
  /** Version found in the database; `null` when the outbox tables do not exist. */
  current: number | null;
  expected: number;
  upToDate: boolean;
}

/** Reads the schema version the outbox tables are at. */
export async function outboxSchemaStatus(
  dataSource: DataSource | SqlExecutor,
  options: OutboxTableOptions = {},
): Promise<OutboxSchemaStatus> {
  const current = await readVersion(createDialect(dataSource, options));
  return {
    current,
    expected: OUTBOX_SCHEMA_VERSION,
    upToDate: current !== null && current >= OUTBOX_SCHEMA_VERSION,
  };
}
