import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { DataSource } from 'typeorm';
import { OutboxModule } from 'nestjs-outbox';
import { createDialect } from '../../../lib/stores/typeorm/dialects';
import { describeWithService } from '../../support/services';
import { schemaV1 } from './fixtures-schema-v1';
import { dataSourceOptions, uniquePrefix } from './typeorm-test-helpers';

/** With `ensureSchema: false`, missing or older outbox tables fail bootstrap with the fix. */
describeWithService('postgres', 'outbox tables are checked at bootstrap', () => {
  let ds: DataSource;
  beforeAll(async () => {
    ds = await new DataSource(dataSourceOptions('postgres')).initialize();
  });
  afterAll(async () => ds.destroy());

  async function boot(prefix: string): Promise<unknown> {
    const moduleRef = await Test.createTestingModule({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: { type: 'typeorm', dataSource: ds, tablePrefix: prefix, ensureSchema: false },
          dispatcher: { enabled: false },
        }),
      ],
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
});
