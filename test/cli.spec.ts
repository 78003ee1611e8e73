import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { DataSource } from 'typeorm';
import { runCli } from '../lib/cli';
import { InboxStore } from '../lib/inbox/inbox.store';
import { dialectName, schemaStatements } from '../lib/stores/typeorm/dialects';
import { SERVICES, serviceUp } from './support/services';
import {
  dataSourceOptions,
  TestDialect,
  uniquePrefix,
} from './stores/typeorm/typeorm-test-helpers';
import { TS_REGISTER } from './support/child-process';
import { INBOX_VERSION_1 } from './inbox/inbox-test-helpers';

function capture() {
  const lines: string[] = [];
  const io = { out: (l: string) => lines.push(l), err: (l: string) => lines.push(l) };
  const run = async (...argv: string[]) => {
    lines.length = 0;
    const code = await runCli(argv, io);
    return { code, text: lines.join('\n') };
  };
  return run;
}

describe('nestjs-outbox CLI: which tables', () => {
  const cli = capture();

  it.each([
    ['mysql', 'utf8mb4_0900_bin'],
    ['mariadb', 'utf8mb4_nopad_bin'],
  ])('prints %s DDL with its NO PAD binary collation for keys', async (dialect, collation) => {
    const { code, text } = await cli('schema', 'sql', '--dialect', dialect, '--outbox');
    expect(code).toBe(0);
    expect(text).toContain(
      `event_key VARCHAR(512) CHARACTER SET utf8mb4 COLLATE ${collation} NULL`,
    );
    expect(text).not.toMatch(/utf8mb4_bin/);
  });

  it.each(['postgres', 'mysql', 'sqlite'])(
    'prints the outbox and inbox DDL of %s by default, one of them with --outbox or --inbox',
    async (dialect) => {
      const both = await cli('schema', 'sql', '--dialect', dialect, '--prefix', 'app_');
      expect(both.code).toBe(0);
      expect(both.text).toMatch(/CREATE TABLE IF NOT EXISTS [`"]app_deliveries[`"]/);
      expect(both.text).toMatch(/CREATE TABLE IF NOT EXISTS [`"]app_inbox[`"]/);

      const outbox = await cli(
        'schema',
        'sql',
        '--dialect',
        dialect,
        '--prefix',
        'app_',
        '--outbox',
      );
      expect(outbox.code).toBe(0);
      expect(outbox.text).toMatch(/app_deliveries/);
      expect(outbox.text).not.toMatch(/app_inbox/);

      const inbox = await cli('schema', 'sql', '--inbox', '--dialect', dialect);
      expect(inbox.code).toBe(0);
      expect(inbox.text).toMatch(/CREATE TABLE IF NOT EXISTS [`"]outbox_inbox[`"]/);
      expect(inbox.text).not.toMatch(/outbox_deliveries|outbox_events/);

      // Both flags: both parts, as without either.
      const flags = await cli('schema', 'sql', '--outbox', '--inbox', '--dialect', dialect);
      expect(flags.text).toMatch(/outbox_deliveries[\s\S]*outbox_inbox/);
    },
  );

  it('refuses a bad inbox prefix, unknown options and a value given to a switch (exit 2)', async () => {
    expect(
      (await cli('schema', 'sql', '--inbox', '--dialect', 'sqlite', '--prefix', 'x;y')).code,
    ).toBe(2);
    const unknown = await cli('schema', 'sql', '--dialect', 'sqlite', '--inbx');
    expect(unknown).toMatchObject({
      code: 2,
      text: expect.stringContaining('unknown option --inbx'),
    });
    expect((await cli('schema', 'sql', '--dialect', 'sqlite', '--inbox=yes')).code).toBe(2);
    expect((await cli('schema', 'status', '--url')).code).toBe(2);
  });

  it('runs as a program: exit codes and output through the bin entry', () => {
    const run = (...argv: string[]) =>
      spawnSync(
        process.execPath,
        ['-r', TS_REGISTER, resolve(__dirname, '../lib/cli.ts'), ...argv],
        { encoding: 'utf8', cwd: resolve(__dirname, '..') },
      );
    const sql = run('schema', 'sql', '--dialect', 'sqlite', '--inbox');
    expect({ status: sql.status, stderr: sql.stderr }).toEqual({ status: 0, stderr: '' });
    expect(sql.stdout).toMatch(/CREATE TABLE IF NOT EXISTS "outbox_inbox"/);
    const noConnection = run('schema', 'status', '--inbox');
    expect(noConnection.status).toBe(2);
    expect(noConnection.stderr).toMatch(/--data-source <file> or --url <url>/);
  });
});

/** A URL the CLI's --url accepts for each test database (environment as the other tests). */
function urlOf(dialect: TestDialect, sqliteFile: string): string {
  const user = (name: string, password?: string) =>
    encodeURIComponent(name) + (password ? `:${encodeURIComponent(password)}` : '');
  switch (dialect) {
    case 'postgres':
      return `postgres://${user(process.env.PGUSER ?? 'postgres', process.env.PGPASSWORD)}@${SERVICES.postgres.host}:${SERVICES.postgres.port}/${process.env.PGDATABASE ?? 'test'}`;
    case 'mariadb':
      return `mariadb://${user(process.env.MYSQL_USER ?? 'root', process.env.MYSQL_PASSWORD)}@${SERVICES.mariadb.host}:${SERVICES.mariadb.port}/${process.env.MYSQL_DATABASE ?? 'test'}`;
    case 'sqlite':
      return `sqlite:${sqliteFile}`;
  }
}

const DIALECTS: Array<[TestDialect, boolean]> = [
  ['sqlite', true],
  ['postgres', serviceUp('postgres')],
  ['mariadb', serviceUp('mariadb')],
];

describe.each(DIALECTS.filter(([, up]) => up).map(([d]) => d))(
  'nestjs-outbox CLI on %s: outbox and inbox',
  (dialect) => {
    const cli = capture();
    let dir: string;
    let url: string;
    let dataSource: DataSource;
    const prefixes: string[] = [];

    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), 'outbox-cli-'));
      url = urlOf(dialect, join(dir, 'app.db'));
      dataSource = await new DataSource(
        dialect === 'sqlite'
          ? { type: 'better-sqlite3', database: join(dir, 'app.db') }
          : dataSourceOptions(dialect),
      ).initialize();
    });
    afterAll(async () => {
      for (const tablePrefix of prefixes) {
        const name = dialectName(dataSource.options.type);
        for (const ddl of schemaStatements(name, { tablePrefix }).drop) await dataSource.query(ddl);
        await new InboxStore(dataSource, { tablePrefix }).dropSchema();
      }
      await dataSource?.destroy();
      rmSync(dir, { recursive: true, force: true });
    });

    const fresh = () => {
      const prefix = uniquePrefix('cli');
      prefixes.push(prefix);
      return (...argv: string[]) => cli('schema', ...argv, '--url', url, '--prefix', prefix);
    };

    it('an empty database: status fails until migrate, which says it created the tables', async () => {
      const schema = fresh();
      const empty = await schema('status');
      expect(empty.code).toBe(1);
      expect(empty.text).toMatch(
        /outbox tables .* and inbox table \S*inbox not found; run: nestjs-outbox schema migrate/,
      );

      const created = await schema('migrate');
      expect(created.code).toBe(0);
      expect(created.text).toMatch(/^outbox tables created \(schema version 3\)$/m);
      expect(created.text).toMatch(/^inbox table \S*inbox created$/m);
      expect(created.text).not.toMatch(/up to date/);

      const ok = await schema('status');
      expect(ok.code).toBe(0);
      expect(ok.text).toMatch(/outbox schema version 3 \(expected 3\): up to date/);
      expect(ok.text).toMatch(/inbox table \S*inbox: up to date/);

      const again = await schema('migrate');
      expect(again.code).toBe(0);
      expect(again.text).toMatch(/outbox schema version 3: already up to date/);
      expect(again.text).toMatch(/inbox table \S*inbox: already up to date/);
    });

    it('an inbox-only database (a consumer): status passes and never asks for outbox tables', async () => {
      const schema = fresh();
      const created = await schema('migrate', '--inbox');
      expect(created.code).toBe(0);
      expect(created.text).toMatch(/^inbox table \S*inbox created$/);

      const status = await schema('status');
      expect(status.code).toBe(0);
      expect(status.text).toMatch(/inbox table \S*inbox: up to date/);
      expect(status.text).toMatch(/outbox tables not found: this database has only the inbox/);
      expect(status.text).not.toMatch(/migrate/);

      expect(await schema('status', '--inbox')).toMatchObject({ code: 0 });
      const outbox = await schema('status', '--outbox');
      expect(outbox.code).toBe(1);
      expect(outbox.text).toMatch(/outbox tables not found .*schema migrate --outbox/);
      expect(outbox.text).not.toMatch(/inbox/);
    });

    it('an outbox-only database: status passes; --inbox asks for the inbox table', async () => {
      const schema = fresh();
      const created = await schema('migrate', '--outbox');
      expect(created).toMatchObject({ code: 0, text: 'outbox tables created (schema version 3)' });

      const status = await schema('status');
      expect(status.code).toBe(0);
      expect(status.text).toMatch(/inbox table \S*inbox not found: not used here/);

      const inbox = await schema('status', '--inbox');
      expect(inbox.code).toBe(1);
      expect(inbox.text).toMatch(
        /inbox table \S*inbox not found; run: nestjs-outbox schema migrate --inbox/,
      );
    });

    it('schema sql --inbox --upgrade prints the step that brings a version-1 inbox table to 2', async () => {
      const prefix = uniquePrefix('cliv1sql');
      prefixes.push(prefix);
      const { table } = new InboxStore(dataSource, { tablePrefix: prefix }).names;
      await dataSource.query(INBOX_VERSION_1[dialect](table));
      const now = { postgres: 'now()', mariadb: 'UTC_TIMESTAMP(3)', sqlite: '0' }[dialect];
      await dataSource.query(
        `INSERT INTO ${table} (consumer, message_id, processed_at) VALUES ('c', 'old', ${now})`,
      );
      const printed = await cli(
        'schema',
        'sql',
        '--dialect',
        dialect,
        '--prefix',
        prefix,
        '--inbox',
        '--upgrade',
      );
      expect(printed.code).toBe(0);
      expect(printed.text).toMatch(/^-- inbox table \(@Inbox\(\)\): upgrade from version 1 /m);
      expect(printed.text).not.toMatch(/CREATE TABLE|outbox tables/);
      const statements = printed.text
        .split(/;\s*$/m)
        .map((q) => q.replace(/^--.*$/gm, '').trim())
        .filter(Boolean);
      expect(statements).toHaveLength(1);
      await dataSource.query(statements[0]);
      await new InboxStore(dataSource, { tablePrefix: prefix }).assertSchema();
      expect(await dataSource.query(`SELECT message_id FROM ${table}`)).toEqual([
        { message_id: 'old' },
      ]);
      const status = await cli('schema', 'status', '--inbox', '--url', url, '--prefix', prefix);
      expect(status.text).toMatch(/inbox table \S*inbox: up to date/);
    });

    it('a version-1 inbox table (no fingerprint): status says so, migrate says it upgraded it', async () => {
      const prefix = uniquePrefix('cliv1');
      prefixes.push(prefix);
      const schema = (...argv: string[]) =>
        cli('schema', ...argv, '--url', url, '--prefix', prefix);
      const { table } = new InboxStore(dataSource, { tablePrefix: prefix }).names;
      await dataSource.query(INBOX_VERSION_1[dialect](table));
      const now = { postgres: 'now()', mariadb: 'UTC_TIMESTAMP(3)', sqlite: '0' }[dialect];
      await dataSource.query(
        `INSERT INTO ${table} (consumer, message_id, processed_at) VALUES ('c', 'old', ${now})`,
      );

      for (const flags of [['--inbox'], []]) {
        const status = await schema('status', ...flags);
        expect(status.code).toBe(1);
        expect(status.text).toMatch(
          /^inbox table \S*inbox is at schema version 1 \(expected 2\); run: nestjs-outbox schema migrate --inbox$/m,
        );
        expect(status.text).not.toMatch(/inbox not found/);
      }

      const upgraded = await schema('migrate', '--inbox');
      expect(upgraded).toMatchObject({ code: 0 });
      expect(upgraded.text).toMatch(/^inbox table \S*inbox upgraded from schema version 1 to 2$/);
      expect(upgraded.text).not.toMatch(/created/);
      await new InboxStore(dataSource, { tablePrefix: prefix }).assertSchema();
      expect(await dataSource.query(`SELECT message_id FROM ${table}`)).toEqual([
        { message_id: 'old' },
      ]);
      expect((await schema('status', '--inbox')).text).toMatch(/inbox table \S*inbox: up to date/);
      expect((await schema('migrate', '--inbox')).text).toMatch(/already up to date/);
    });

    it("prints the connection's dialect for the inbox with schema sql", async () => {
      const schema = fresh();
      const sql = await schema('sql', '--inbox');
      expect(sql.code).toBe(0);
      expect(sql.text).toMatch(/CREATE TABLE IF NOT EXISTS \S*inbox/);
      const processedAt = { postgres: 'timestamptz', mariadb: 'DATETIME(3)', sqlite: 'INTEGER' };
      expect(sql.text).toContain(`processed_at ${processedAt[dialect]} NOT NULL`);
      expect(sql.text).not.toMatch(/deliveries/);
    });
  },
);
