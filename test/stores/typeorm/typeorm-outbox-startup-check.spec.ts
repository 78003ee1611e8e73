import { Injectable } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { DataSource } from 'typeorm';
import { Pool } from 'pg';
import { Inbox, OutboxModule, pgExecutor } from 'nestjs-outbox';
import { runCli } from '../../../lib/cli';
import { InboxStore } from '../../../lib/inbox/inbox.store';
import { createDialect } from '../../../lib/stores/typeorm/dialects';
import { describeWithService, SERVICES } from '../../support/services';
import { schemaV1 } from './fixtures-schema-v1';
import { dataSourceOptions, uniquePrefix } from './typeorm-test-helpers';

/** With `ensureSchema: false`, missing or older outbox tables fail bootstrap with the fix. */
describeWithService('postgres', 'outbox tables are checked at bootstrap', () => {
  let ds: DataSource;
  beforeAll(async () => {
    ds = await new DataSource(dataSourceOptions('postgres')).initialize();
  });
  afterAll(async () => ds.destroy());

  async function boot(
    prefix: string,
    providers: any[] = [],
    inbox?: { tablePrefix?: string; ensureSchema?: boolean },
  ): Promise<unknown> {
    const moduleRef = await Test.createTestingModule({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: { type: 'typeorm', dataSource: ds, tablePrefix: prefix, ensureSchema: false },
          dispatcher: { enabled: false },
          ...(inbox ? { inbox } : {}),
        }),
      ],
      providers,
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    let bootError: unknown;
    await app.init().catch((e) => (bootError = e));
    await app.close().catch(() => undefined);
    return bootError;
  }

  it('fails when the tables do not exist, naming the command and the migrations', async () => {
    const error = await boot(uniquePrefix('nochk'));
    expect(String(error)).toMatch(
      /store\.ensureSchema.*do not exist.*npx nestjs-outbox schema migrate --outbox.*--prefix t_nochk_.*NestjsOutboxSchema1781000000000/,
    );
  });

  it('tells a consumer-only app that InboxModule needs no outbox tables', async () => {
    const error = await boot(uniquePrefix('nochk'));
    expect(String(error)).toMatch(
      /only consumes.*InboxModule\.forRoot\(\{ dataSource \}\) instead of OutboxModule/,
    );
  });

  it('fails when the tables are at an older schema version', async () => {
    const prefix = uniquePrefix('v1chk');
    const d = createDialect(ds, { tablePrefix: prefix });
    try {
      for (const ddl of schemaV1('postgres', d.tables)) await ds.query(ddl);
      await ds.query(`INSERT INTO ${d.tables.version.text} (version) VALUES (1)`);
      expect(String(await boot(prefix))).toMatch(
        /schema version 1, this release needs 3.*schema migrate/,
      );
    } finally {
      for (const ddl of d.dropSchema()) await ds.query(ddl);
    }
  });

  describe('an app with @Inbox() on the same database', () => {
    @Injectable()
    class Consumer {
      @Inbox({ consumer: 'orders' })
      handle(): void {}
    }
    const url = `postgres://${encodeURIComponent(process.env.PGUSER ?? 'postgres')}${
      process.env.PGPASSWORD ? `:${encodeURIComponent(process.env.PGPASSWORD)}` : ''
    }@${SERVICES.postgres.host}:${SERVICES.postgres.port}/${process.env.PGDATABASE ?? 'test'}`;

    async function dropAll(prefix: string): Promise<void> {
      for (const ddl of createDialect(ds, { tablePrefix: prefix }).dropSchema()) {
        await ds.query(ddl);
      }
      await new InboxStore(ds, { tablePrefix: prefix }).dropSchema();
    }

    it('names the command that migrates both tables; after running it, the app starts', async () => {
      const prefix = uniquePrefix('bothchk');
      try {
        const error = String(await boot(prefix, [Consumer]));
        expect(error).toMatch(/do not exist/);
        expect(error).toContain(
          `Run \`npx nestjs-outbox schema migrate --url <database url> --prefix ${prefix}\``,
        );
        expect(error).not.toMatch(/--outbox/);
        expect(error).toMatch(/createInboxMigration\(\)/);

        // What the user does next: run that command, restart.
        const lines: string[] = [];
        const io = { out: (l: string) => lines.push(l), err: (l: string) => lines.push(l) };
        expect(await runCli(['schema', 'migrate', '--url', url, '--prefix', prefix], io)).toBe(0);
        expect(await boot(prefix, [Consumer])).toBeUndefined();
      } finally {
        await dropAll(prefix);
      }
    });

    it("the 'sql' store over node-postgres says the same, and the DDL of both", async () => {
      const prefix = uniquePrefix('sqlchk');
      const { host, port, username, password, database } = dataSourceOptions('postgres') as {
        host: string;
        port: number;
        username: string;
        password?: string;
        database: string;
      };
      const pool = new Pool({ host, port, user: username, password, database });
      try {
        const moduleRef = await Test.createTestingModule({
          imports: [
            OutboxModule.forRoot({
              store: {
                type: 'sql',
                executor: pgExecutor(pool),
                tablePrefix: prefix,
                ensureSchema: false,
              },
              dispatcher: { enabled: false },
            }),
          ],
          providers: [Consumer],
        }).compile();
        const app = moduleRef.createNestApplication({ logger: false });
        const error = await app.init().then(
          () => undefined,
          (e: unknown) => e,
        );
        await app.close().catch(() => undefined);
        expect(String(error)).toContain(
          `Run \`npx nestjs-outbox schema migrate --url <database url> --prefix ${prefix}\` ` +
            '(the outbox tables and the inbox table of @Inbox()), or add the DDL that ' +
            '`npx nestjs-outbox schema sql --dialect postgres` prints',
        );
      } finally {
        await pool.end();
      }
    });

    it('keeps --outbox when the inbox table is elsewhere or created by the app', async () => {
      const prefix = uniquePrefix('onechk');
      // The inbox table under its own prefix exists: only the outbox tables are missing.
      await new InboxStore(ds, { tablePrefix: `${prefix}x_` }).ensureSchema();
      const other = await boot(prefix, [Consumer], { tablePrefix: `${prefix}x_` });
      expect(String(other)).toMatch(/schema migrate --outbox --url <database url> --prefix/);
      const own = await boot(prefix, [Consumer], { ensureSchema: true });
      expect(String(own)).toMatch(/schema migrate --outbox --url <database url> --prefix/);
      await dropAll(prefix);
      await new InboxStore(ds, { tablePrefix: `${prefix}x_` }).dropSchema();
    });
  });
});
