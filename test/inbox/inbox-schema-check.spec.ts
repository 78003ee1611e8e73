import { Injectable } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import type { Pool } from 'pg';
import { DataSource } from 'typeorm';
import {
  ensureOutboxSchema,
  Inbox,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  pgExecutor,
} from 'nestjs-outbox';
import { describeWithService } from '../support/services';
import { openPool } from '../stores/sql/pg-test-helpers';
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

describeWithService('postgres', '@Inbox() on the sql store checks its table at bootstrap', () => {
  const prefix = uniquePrefix('ischx');
  let pool: Pool;
  beforeAll(async () => {
    pool = openPool(2);
    await ensureOutboxSchema(pgExecutor(pool), { tablePrefix: prefix }); // no inbox table
  });
  afterAll(async () => {
    for (const t of ['deliveries', 'events', 'schema_version', 'inbox'])
      await pool.query(`DROP TABLE IF EXISTS ${prefix}${t}`);
    await pool.end();
  });

  const bootError = async (): Promise<unknown> => {
    const moduleRef = await Test.createTestingModule({
      imports: [
        ScheduleModule.forRoot(),
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
    let error: unknown;
    await app.init().catch((e) => (error = e));
    await app.close().catch(() => undefined);
    return error;
  };

  it('names the CLI and its DDL for the executor, not the TypeORM migration classes', async () => {
    const message = String(await bootError());
    expect(message).toContain(`inbox table ${prefix}inbox does not exist`);
    expect(message).toContain(
      `npx nestjs-outbox schema migrate --inbox --url <database url> --prefix ${prefix}`,
    );
    expect(message).toContain(
      `npx nestjs-outbox schema sql --inbox --dialect postgres --prefix ${prefix}`,
    );
    expect(message).not.toContain('createInboxMigration');
  });

  it('on a version 1 table names the CLI upgrade, not the TypeORM migration class', async () => {
    await pool.query(`CREATE TABLE ${prefix}inbox (
      consumer varchar(255) NOT NULL, message_id varchar(255) NOT NULL,
      processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer, message_id))`);
    const message = String(await bootError());
    expect(message).toContain('schema version 1');
    expect(message).toContain(
      `npx nestjs-outbox schema migrate --inbox --url <database url> --prefix ${prefix}`,
    );
    expect(message).not.toContain('createInboxFingerprintMigration');
  });
});
