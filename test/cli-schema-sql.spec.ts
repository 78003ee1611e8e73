import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import { runCli } from '../lib/cli';
import { InboxStore } from '../lib/inbox/inbox.store';
import { TypeOrmExecutor } from '../lib/executors/typeorm-executor';
import { dialectName, schemaStatements } from '../lib/stores/typeorm/dialects';
import { SqlOutboxStore } from '../lib/stores/typeorm/internal';
import { serviceUp } from './support/services';
import {
  dataSourceOptions,
  TestDialect,
  uniquePrefix,
} from './stores/typeorm/typeorm-test-helpers';

/**
 * docs/migrations.md: the DDL `npx nestjs-outbox schema sql` prints is what a migration of any
 * tool (Prisma Migrate, drizzle-kit, MikroORM, Kysely, plain SQL) runs. Applied as printed to a
 * fresh prefix, a store with `ensureSchema: false` starts on it.
 */
async function cli(...argv: string[]): Promise<{ code: number; text: string }> {
  const lines: string[] = [];
  const io = { out: (line: string) => lines.push(line), err: (line: string) => lines.push(line) };
  const code = await runCli(argv, io);
  return { code, text: lines.join('\n') };
}

/** The printed statements, one by one, as a migration file holds them (`;` at line ends). */
function statements(printed: string): string[] {
  return printed
    .split(/;\s*$/m)
    .map((s) => s.replace(/^--.*$/gm, '').trim())
    .filter(Boolean);
}

const DIALECTS: Array<[Exclude<TestDialect, 'sqlite'>, string]> = [
  ['postgres', 'postgres'],
  ['mariadb', 'mariadb'],
];

describe.each(DIALECTS.filter(([d]) => serviceUp(d)))(
  'schema sql printed into a migration, on %s',
  (dialect, flag) => {
    let dataSource: DataSource;
    const prefixes: string[] = [];

    beforeAll(async () => {
      dataSource = await new DataSource(dataSourceOptions(dialect)).initialize();
    });
    afterAll(async () => {
      const name = dialectName(dataSource.options.type);
      for (const tablePrefix of prefixes) {
        for (const ddl of schemaStatements(name, { tablePrefix }).drop) await dataSource.query(ddl);
        await new InboxStore(dataSource, { tablePrefix }).dropSchema();
      }
      await dataSource?.destroy();
    });

    const apply = async (printed: string) => {
      for (const statement of statements(printed)) await dataSource.query(statement);
    };

    it('a store with ensureSchema: false starts on the printed DDL, applied twice', async () => {
      const tablePrefix = uniquePrefix('mig');
      prefixes.push(tablePrefix);
      const printed = await cli('schema', 'sql', '--dialect', flag, '--prefix', tablePrefix);
      expect(printed.code).toBe(0);
      await apply(printed.text);
      // Run twice, as a migration replayed on another environment: idempotent.
      await apply(printed.text);

      const store = new SqlOutboxStore(new TypeOrmExecutor(dataSource), {
        tablePrefix,
        ensureSchema: false,
      });
      await expect(store.init()).resolves.toBeUndefined();
      await store.close();
      const { rows } = await new TypeOrmExecutor(dataSource).query({
        text: `SELECT count(*) AS n FROM ${tablePrefix}schema_version`,
        params: [],
      });
      expect(Number(rows[0].n)).toBe(1);
    });

    it('--upgrade brings tables recorded at an earlier version to this one', async () => {
      const tablePrefix = uniquePrefix('mgu');
      prefixes.push(tablePrefix);
      const executor = new TypeOrmExecutor(dataSource);
      const printed = await cli('schema', 'sql', '--dialect', flag, '--prefix', tablePrefix);
      await apply(printed.text);
      const version = `${tablePrefix}schema_version`;
      await executor.query({ text: `UPDATE ${version} SET version = 2`, params: [] });
      const behind = new SqlOutboxStore(executor, { tablePrefix, ensureSchema: false });
      await expect(behind.init()).rejects.toThrow(/schema version 2, this release needs 3/);

      const upgrade = await cli(
        'schema',
        'sql',
        '--dialect',
        flag,
        '--prefix',
        tablePrefix,
        '--upgrade',
      );
      expect(upgrade.code).toBe(0);
      expect(upgrade.text).toMatch(
        /^-- outbox tables: upgrade from an earlier version to version 3$/m,
      );
      expect(upgrade.text).not.toMatch(/inbox/);
      if (dialect === 'mariadb') {
        // Tables at version 2 have the index version 2 added: MariaDB refuses the step again
        // (1061), as docs/migrations.md says; the rest applies.
        await apply(upgrade.text.replace(/^ALTER TABLE \S+ (ADD|DROP) KEY .*$/gm, ''));
      } else {
        await apply(upgrade.text);
      }
      const store = new SqlOutboxStore(executor, { tablePrefix, ensureSchema: false });
      await expect(store.init()).resolves.toBeUndefined();
      await store.close();
    });

    it('--upgrade is refused outside schema sql (exit 2)', async () => {
      expect((await cli('schema', 'migrate', '--upgrade')).code).toBe(2);
    });
  },
);
