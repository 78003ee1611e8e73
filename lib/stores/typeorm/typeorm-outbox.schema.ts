import type { DataSource, MigrationInterface, QueryRunner } from 'typeorm';
import { createDialect, dialectName, schemaStatements } from './dialects';
import { Plan } from './dialects/sql-dialect';
import { raw, sql } from './sql';
import { OutboxTableOptions } from './typeorm-outbox.tables';

/** Version of the outbox tables this release expects. */
export const OUTBOX_SCHEMA_VERSION = 1;

/** Seconds `ensureOutboxSchema` waits for another replica that is creating the tables. */
const SCHEMA_LOCK_SECONDS = 60;

/**
 * Creates the outbox tables and indexes if missing, for development and tests. Safe when several
 * replicas call it at once: they serialize on a PostgreSQL advisory lock / MySQL `GET_LOCK`
 * (SQLite: an immediate transaction). Production deployments usually run the migration instead.
 */
export async function ensureOutboxSchema(
  dataSource: DataSource,
  options: OutboxTableOptions = {},
): Promise<void> {
  const dialect = createDialect(dataSource, options);
  const lockName = `${dialect.tables.lockName}:schema`;
  await dialect.run(
    function* (): Plan<void> {
      yield dialect.lock(lockName, SCHEMA_LOCK_SECONDS);
      const unlock = dialect.unlock(lockName);
      try {
        for (const ddl of dialect.createSchema()) yield raw(ddl);
        const { rows } = yield sql`SELECT MAX(version) AS version FROM ${dialect.tables.version}`;
        if (!(Number(rows[0]?.version ?? 0) >= OUTBOX_SCHEMA_VERSION)) {
          yield sql`INSERT INTO ${dialect.tables.version} (version, applied_at) VALUES (${OUTBOX_SCHEMA_VERSION}, ${dialect.now})`;
        }
      } finally {
        if (unlock) yield unlock;
      }
    },
    { transaction: true },
  );
}

export interface OutboxSchemaStatus {
  /** Version found in the database; `null` when the outbox tables do not exist. */
  current: number | null;
  expected: number;
  upToDate: boolean;
}

/** Reads the schema version the outbox tables are at. */
export async function outboxSchemaStatus(
  dataSource: DataSource,
  options: OutboxTableOptions = {},
): Promise<OutboxSchemaStatus> {
  const dialect = createDialect(dataSource, options);
  let current: number | null = null;
  try {
    current = await dialect.run(function* (): Plan<number | null> {
      const { rows } = yield sql`SELECT MAX(version) AS version FROM ${dialect.tables.version}`;
      const v = rows[0]?.version;
      return v === null || v === undefined ? null : Number(v);
    });
  } catch {
    current = null;
  }
  return {
    current,
    expected: OUTBOX_SCHEMA_VERSION,
    upToDate: current !== null && current >= OUTBOX_SCHEMA_VERSION,
  };
}

async function migrateUp(queryRunner: QueryRunner, options: OutboxTableOptions): Promise<void> {
  const name = dialectName(queryRunner.connection.options.type);
  const { create } = schemaStatements(name, options);
  for (const ddl of create) await queryRunner.query(ddl);
  const dialect = createDialect(queryRunner.connection, options);
  const version = dialect.tables.version.text;
  await queryRunner.query(
    `INSERT INTO ${version} (version, applied_at) VALUES (${OUTBOX_SCHEMA_VERSION}, ${dialect.now.text})`,
  );
}

async function migrateDown(queryRunner: QueryRunner, options: OutboxTableOptions): Promise<void> {
  const name = dialectName(queryRunner.connection.options.type);
  for (const ddl of schemaStatements(name, options).drop) await queryRunner.query(ddl);
}

/**
 * A TypeORM migration creating the outbox tables with your own prefix / schema. Give each call a
 * distinct `timestamp` (TypeORM orders and records migrations by it).
 *
 * @example migrations: [createOutboxMigration({ tablePrefix: 'billing_outbox_' }, 1780000000001)]
 */
export function createOutboxMigration(
  options: OutboxTableOptions = {},
  timestamp = 1780000000000,
): new () => MigrationInterface {
  return class implements MigrationInterface {
    name = `NestjsOutboxSchema${timestamp}`;
    up(queryRunner: QueryRunner): Promise<void> {
      return migrateUp(queryRunner, options);
    }
    down(queryRunner: QueryRunner): Promise<void> {
      return migrateDown(queryRunner, options);
    }
  };
}

/**
 * Creates the outbox tables with the default prefix `outbox_` (schema version 1). Add it to your
 * DataSource's `migrations`.
 */
export class NestjsOutboxSchema1780000000000 implements MigrationInterface {
  name = 'NestjsOutboxSchema1780000000000';
  up(queryRunner: QueryRunner): Promise<void> {
    return migrateUp(queryRunner, {});
  }
  down(queryRunner: QueryRunner): Promise<void> {
    return migrateDown(queryRunner, {});
  }
}
