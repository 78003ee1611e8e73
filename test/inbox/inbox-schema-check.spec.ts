import { Injectable } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { DataSource } from 'typeorm';
import { ensureOutboxSchema, Inbox, OutboxEvent, OutboxHandler, OutboxModule } from 'nestjs-outbox';
import { describeWithService } from '../support/services';
import { dataSourceOptions, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';

@Injectable()
class Consumer {
  @OutboxHandler('thing.done')
  @Inbox()
  handle(_e: OutboxEvent) {
    return undefined;
  }
}

describeWithService('postgres', '@Inbox() checks its table at bootstrap', () => {
  const prefix = uniquePrefix('ischk');
  let ds: DataSource;
  beforeAll(async () => {
    ds = await new DataSource(dataSourceOptions('postgres')).initialize();
    await ensureOutboxSchema(ds, { tablePrefix: prefix }); // outbox tables only, no inbox migration
  });
  afterAll(async () => {
    for (const t of ['deliveries', 'events', 'schema_version', 'inbox'])
      await ds.query(`DROP TABLE IF EXISTS ${prefix}${t}`);
    await ds.destroy();
  });

  it('fails bootstrap when the inbox table is missing and ensureSchema is false', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: { type: 'typeorm', dataSource: ds, tablePrefix: prefix, ensureSchema: false },
          dispatcher: { enabled: false },
        }),
      ],
      providers: [Consumer],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    let bootError: unknown;
    await app.init().catch((e) => (bootError = e));
    await app.close().catch(() => undefined);
    expect(String(bootError)).toMatch(/inbox table .* does not exist.*createInboxMigration/);
  });
});
