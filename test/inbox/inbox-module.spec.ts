import { Body, Controller, INestApplication, Module, Post } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Inbox, InboxContext, InboxModule, InboxService, OutboxService } from 'nestjs-outbox';
import { describeWithService } from '../support/services';
import {
  createEffectTable,
  inboxDataSourceOptions,
  inboxTable,
  openInboxDataSource,
  uniquePrefix,
} from './inbox-test-helpers';

let effectsTable = '';

@Controller('consume')
class ConsumeController {
  constructor(private readonly inbox: InboxContext) {}

  @Post()
  @Inbox({ consumer: 'consume', duplicateResult: { status: 'duplicate' } })
  async consume(@Body() body: { note: string }): Promise<{ status: string }> {
    await this.inbox.manager.query(`INSERT INTO ${effectsTable} VALUES ($1, $2)`, [
      this.inbox.messageId,
      body.note,
    ]);
    return { status: 'applied' };
  }
}

describeWithService(
  'postgres',
  'InboxModule: a consumer-only app (no OutboxModule, no ScheduleModule)',
  () => {
    let dataSource: DataSource;
    let effects: Awaited<ReturnType<typeof createEffectTable>>;
    const prefix = uniquePrefix('inboxmod');

    beforeAll(async () => {
      dataSource = await openInboxDataSource('postgres');
      effects = await createEffectTable(dataSource, `${prefix}effects`);
      effectsTable = effects.table;
    });

    afterAll(async () => {
      await effects?.drop();
      await inboxTable(dataSource, prefix).drop();
      await dataSource?.destroy();
    });

    async function exercise(app: INestApplication, key: string): Promise<void> {
      const post = () =>
        request(app.getHttpServer())
          .post('/consume')
          .set('Idempotency-Key', key)
          .send({ note: 'n' });
      await post().expect(201, { status: 'applied' });
      await post().expect(201, { status: 'duplicate' });
      expect(await effects.count(key)).toBe(1);
      expect(await inboxTable(dataSource, prefix).count('consume', key)).toBe(1);
      // Only the inbox: no outbox service, no scheduler registry was needed.
      expect(() => app.get(OutboxService, { strict: false })).toThrow();
      expect(() => app.get(SchedulerRegistry, { strict: false })).toThrow();
    }

    it('forRoot({ dataSource }) applies each message once; retention works without a scheduler', async () => {
      @Module({
        imports: [InboxModule.forRoot({ dataSource, tablePrefix: prefix, retentionMs: 1 })],
        controllers: [ConsumeController],
      })
      class ConsumerApp {}
      const moduleRef = await Test.createTestingModule({ imports: [ConsumerApp] }).compile();
      const app = moduleRef.createNestApplication({ logger: false });
      await app.init();
      try {
        await exercise(app, 'module-1');
        await new Promise((resolve) => setTimeout(resolve, 5));
        const [result] = await app.get(InboxService).cleanup();
        expect(result.deleted).toBeGreaterThanOrEqual(1);
        expect(await inboxTable(dataSource, prefix).count('consume', 'module-1')).toBe(0);
      } finally {
        await app.close();
      }
    });

    it('forRootAsync({ useFactory }) with a dataSourceToken from @nestjs/typeorm', async () => {
      @Module({
        imports: [
          TypeOrmModule.forRoot(inboxDataSourceOptions('postgres')),
          InboxModule.forRootAsync({
            useFactory: () => ({
              dataSourceToken: getDataSourceToken(),
              tablePrefix: prefix,
              cleanupIntervalMs: 0,
            }),
          }),
        ],
        controllers: [ConsumeController],
      })
      class AsyncConsumerApp {}
      const moduleRef = await Test.createTestingModule({ imports: [AsyncConsumerApp] }).compile();
      const app = moduleRef.createNestApplication({ logger: false });
      await app.init();
      try {
        await exercise(app, 'module-2');
      } finally {
        await app.close();
      }
    });

    it('ensureSchema: false and no table: the error names InboxModule and ensureSchema', async () => {
      const missing = uniquePrefix('inboxmodnone');
      @Module({
        imports: [InboxModule.forRoot({ dataSource, tablePrefix: missing, ensureSchema: false })],
        controllers: [ConsumeController],
      })
      class NoTableApp {}
      const moduleRef = await Test.createTestingModule({ imports: [NoTableApp] }).compile();
      const app = moduleRef.createNestApplication({ logger: false });
      const error = await app.init().then(
        () => undefined,
        (e: unknown) => e,
      );
      await app.close().catch(() => undefined);
      expect((error as Error).message).toMatch(
        new RegExp(
          `^Invalid InboxModule option "ensureSchema": the inbox table ${missing}inbox does not exist; ` +
            '.*createInboxMigration\\(\\).*, or set ensureSchema: true$',
        ),
      );
    });

    it('refuses options without a DataSource, naming the field', async () => {
      @Module({ imports: [InboxModule.forRoot({})], controllers: [ConsumeController] })
      class NoDataSourceApp {}
      await expect(
        Test.createTestingModule({ imports: [NoDataSourceApp] }).compile(),
      ).rejects.toThrow(/^Invalid InboxModule option "dataSource"/);
    });
  },
);
