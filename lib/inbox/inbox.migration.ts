import type { MigrationInterface, QueryRunner } from 'typeorm';
import { inboxDialectFor } from './dialects';
import { InboxTableOptions } from './inbox.store';

/**
 * A TypeORM migration class creating (and on `down` dropping) the inbox table, for apps that
 * run with `inbox.ensureSchema: false` and manage their schema with migrations:
 *
 * ```ts
 * migrations: [createInboxMigration({ tablePrefix: 'outbox_' })]
 * ```
 *
 * The class name ends in a fixed timestamp, as TypeORM requires; pass `timestamp` to place it
 * elsewhere in your migration order.
 */
export function createInboxMigration(
  options: InboxTableOptions & { timestamp?: number } = {},
): new () => MigrationInterface {
  const timestamp = options.timestamp ?? 1767225600000;
  const prefix = options.tablePrefix ?? 'outbox_';
  const names = (runner: QueryRunner) => {
    const dialect = inboxDialectFor(String(runner.connection.options.type));
    return { dialect, table: dialect.tableNames(prefix, options.schema) };
  };
  const migration = class implements MigrationInterface {
    name = `CreateOutboxInbox${timestamp}`;

    async up(runner: QueryRunner): Promise<void> {
      const { dialect, table } = names(runner);
      for (const sql of dialect.createSchema(table)) await runner.query(sql);
    }

    async down(runner: QueryRunner): Promise<void> {
      const { dialect, table } = names(runner);
      for (const sql of dialect.dropSchema(table)) await runner.query(sql);
    }
  };
  Object.defineProperty(migration, 'name', { value: `CreateOutboxInbox${timestamp}` });
  return migration;
}

/**
 * Upgrades an inbox table created by an earlier `createInboxMigration()` to schema version 2 (the
 * request fingerprint column of HTTP idempotency keys). Safe on a table that already has it, so
 * list it after `createInboxMigration()` in new apps too:
 *
 * ```ts
 * migrations: [createInboxMigration(), createInboxFingerprintMigration()]
 * ```
 */
export function createInboxFingerprintMigration(
  options: InboxTableOptions & { timestamp?: number } = {},
): new () => MigrationInterface {
  const timestamp = options.timestamp ?? 1796083200000;
  const prefix = options.tablePrefix ?? 'outbox_';
  const name = `AddOutboxInboxFingerprint${timestamp}`;
  const names = (runner: QueryRunner) => {
    const dialect = inboxDialectFor(String(runner.connection.options.type));
    return { dialect, table: dialect.tableNames(prefix, options.schema) };
  };
  const migration = class implements MigrationInterface {
    name = name;

    async up(runner: QueryRunner): Promise<void> {
      const { dialect, table } = names(runner);
      if (!(await runner.hasColumn(table.plain, 'fingerprint'))) {
        await runner.query(dialect.addFingerprint(table));
      }
    }

    async down(runner: QueryRunner): Promise<void> {
      const { dialect, table } = names(runner);
      if (await runner.hasColumn(table.plain, 'fingerprint')) {
        await runner.query(dialect.dropFingerprint(table));
      }
    }
  };
  Object.defineProperty(migration, 'name', { value: name });
  return migration;
}
