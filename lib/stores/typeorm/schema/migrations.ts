import type { MigrationInterface, QueryRunner } from 'typeorm';
import { TypeOrmConnection } from '../../../executors/typeorm-executor';
import { createDialect, dialectName, schemaStatements } from '../dialects';
import { applySchema } from './schema';
import { OutboxTableOptions } from './tables';

async function migrateUp(queryRunner: QueryRunner, options: OutboxTableOptions): Promise<void> {
  const dialect = createDialect(queryRunner.connection, options);
  await dialect.runOn(new TypeOrmConnection(queryRunner), () => applySchema(dialect));
}

async function migrateDown(queryRunner: QueryRunner, options: OutboxTableOptions): Promise<void> {
  const name = dialectName(queryRunner.connection.options.type);
  for (const ddl of schemaStatements(name, options).drop) await queryRunner.query(ddl);
}

/**
 * A TypeORM migration creating the outbox tables with your own prefix / schema, or upgrading
 * tables of an earlier version (it is idempotent). Give each call a distinct `timestamp` (TypeORM
 * orders and records migrations by it); after upgrading the library, add one with a new
 * timestamp to bring existing tables forward.
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
 * Creates the outbox tables with the default prefix `outbox_`, or upgrades existing ones, to the
 * current schema version. Add it to your DataSource's `migrations`.
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

/**
 * Brings tables of the default prefix from schema 1 (release 0.1) to the current version: open
 * work stays in `outbox_deliveries`, dead letters move to `outbox_dead_letters`, delivered rows
 * leave. On a new database it runs after `NestjsOutboxSchema1780000000000` and changes nothing.
 * `down` keeps the current layout (version 1 is not restored).
 */
export class NestjsOutboxSchema1781000000000 implements MigrationInterface {
  name = 'NestjsOutboxSchema1781000000000';
  up(queryRunner: QueryRunner): Promise<void> {
    return migrateUp(queryRunner, {});
  }
  async down(): Promise<void> {}
}

/**
 * Brings tables of the default prefix from schema 2 to 3: on MySQL/MariaDB, types, keys and
 * handler names move to a NO PAD binary collation, so keys differing only by trailing spaces stay
 * two keys (other databases: only the version changes). A no-op on tables already at version 3.
 */
export class NestjsOutboxSchema1782000000000 implements MigrationInterface {
  name = 'NestjsOutboxSchema1782000000000';
  up(queryRunner: QueryRunner): Promise<void> {
    return migrateUp(queryRunner, {});
  }
  async down(): Promise<void> {}
}
