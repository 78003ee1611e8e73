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
