import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { INestApplication, Type } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { Client } from 'pg';
import { OutboxEvents } from 'nestjs-outbox';
import { describeWithService, SERVICES } from './support/services';

/**
 * The README's promise to a first-time reader: the quick start, copied from the first 100 lines
 * alone, is a working transactional append on PostgreSQL. Its TypeScript blocks are written to a
 * scratch directory and required as written (nothing added but the database URL it reads), then
 * run against the real server, in a schema of this test: an event appended inside the committed
 * transaction reaches the handler, and one whose transaction rolls back reaches nothing.
 */
const root = resolve(__dirname, '..');

function quickStartSnippet(): string {
  const firstScreen = readFileSync(join(root, 'README.md'), 'utf8')
    .split('\n')
    .slice(0, 100)
    .join('\n');
  const blocks = [...firstScreen.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
  const snippet = blocks.find((code) => code.includes('class AppModule'));
  if (!snippet) throw new Error('the first 100 lines of the README hold no quick start AppModule');
  return snippet;
}

interface QuickStart {
  AppModule: Type;
  Orders: Type<{ place(orderId: string): Promise<void> }>;
}

describeWithService('postgres', 'README quick start, run as written', () => {
  const schema = `readme_qs_${randomBytes(4).toString('hex')}`;
  const { host, port } = SERVICES.postgres;
  const user = process.env.PGUSER ?? 'postgres';
  const password = process.env.PGPASSWORD ? `:${encodeURIComponent(process.env.PGPASSWORD)}` : '';
  const database = process.env.PGDATABASE ?? 'test';
  const base = `postgres://${encodeURIComponent(user)}${password}@${host}:${port}/${database}`;
  let admin: Client;
  let app: INestApplication | undefined;
  let dir: string | undefined;
  let quickStart: QuickStart;
  const mailed: string[] = [];
  const delivered: string[] = [];
  const savedEnv = { DATABASE_URL: process.env.DATABASE_URL, NODE_ENV: process.env.NODE_ENV };

  beforeAll(async () => {
    admin = new Client({ connectionString: base });
    await admin.connect();
    await admin.query(`CREATE SCHEMA ${schema}`);
    // The reader's own table. Its key is checked at COMMIT, so a duplicate order fails after the
    // append ran and the whole transaction, event included, rolls back.
    await admin.query(
      `CREATE TABLE ${schema}.orders (id text PRIMARY KEY DEFERRABLE INITIALLY DEFERRED)`,
    );

    dir = mkdtempSync(join(root, 'test', '.readme-quickstart-'));
    writeFileSync(join(dir, 'app.module.ts'), quickStartSnippet());
    // Every connection of the app (pool and wake-up listener) works in this test's schema.
    process.env.DATABASE_URL = `${base}?options=${encodeURIComponent(`-c search_path=${schema}`)}`;
    // Production: the store creates no table itself, so the quick start's migration must have.
    process.env.NODE_ENV = 'production';
    quickStart = require(join(dir, 'app.module.ts')) as QuickStart;

    jest.spyOn(console, 'log').mockImplementation((line: unknown) => {
      if (typeof line === 'string' && line.startsWith('mail: ')) mailed.push(line);
    });
    const moduleRef = await Test.createTestingModule({ imports: [quickStart.AppModule] }).compile();
    app = moduleRef.createNestApplication({ logger: ['error'] });
    app.get(OutboxEvents).on('delivered', (e) => delivered.push(`${e.handler} ${e.type}`));
    await app.init();
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    jest.restoreAllMocks();
    process.env.DATABASE_URL = savedEnv.DATABASE_URL;
    process.env.NODE_ENV = savedEnv.NODE_ENV;
    if (savedEnv.DATABASE_URL === undefined) delete process.env.DATABASE_URL;
    if (savedEnv.NODE_ENV === undefined) delete process.env.NODE_ENV;
    await admin?.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin?.end();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function until(check: () => boolean, timeoutMs = 15_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!check()) {
      if (Date.now() > deadline) throw new Error('timed out');
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  it('created the outbox tables through the migration', async () => {
    const { rows } = await admin.query<{ table_name: string }>(
      `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`,
      [schema],
    );
    expect(rows.map((r) => r.table_name)).toEqual(
      expect.arrayContaining(['orders', 'outbox_events', 'outbox_deliveries', 'migrations']),
    );
  });

  it('delivers an event appended in a committed transaction to the handler', async () => {
    await app!.get(quickStart.Orders).place('o-1');
    await until(() => mailed.includes('mail: order o-1 placed'));
    await until(() => delivered.length === 1); // reported once the ack is written
    expect(delivered).toEqual(['OrderMailer.send order.placed']);
    const { rows } = await admin.query(`SELECT id FROM ${schema}.orders`);
    expect(rows).toEqual([{ id: 'o-1' }]);
  });

  it('delivers nothing from a transaction that rolled back after the append', async () => {
    // The second order o-1 breaks the key at COMMIT: the append ran, then everything rolled back.
    await expect(app!.get(quickStart.Orders).place('o-1')).rejects.toThrow(/duplicate key/);
    const events = await admin.query(
      `SELECT event_key AS key FROM ${schema}.outbox_events ORDER BY 1`,
    );
    expect(events.rows).toEqual([{ key: 'o-1' }]);

    // A later committed order is delivered; the rolled-back one never was.
    await app!.get(quickStart.Orders).place('o-2');
    await until(() => mailed.includes('mail: order o-2 placed') && delivered.length === 2);
    await new Promise((r) => setTimeout(r, 1_000)); // two poll intervals for a stray delivery
    expect(mailed).toEqual(['mail: order o-1 placed', 'mail: order o-2 placed']);
    expect(delivered).toHaveLength(2);
  });
});
