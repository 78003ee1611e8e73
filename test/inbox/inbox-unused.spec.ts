import { Injectable, Logger } from '@nestjs/common';
import { ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import {
  ensureOutboxSchema,
  InboxService,
  OutboxDispatcher,
  OutboxEvent,
  INBOX_CLEANUP_INTERVAL,
  OutboxHandler,
  OutboxModule,
  OutboxService,
} from 'nestjs-outbox';
import { describeWithService } from '../support/services';
import { dataSourceOptions, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';

@Injectable()
class Seen {
  ids: string[] = [];
  @OutboxHandler('order.placed')
  handle(e: OutboxEvent) {
    this.ids.push(e.id);
  }
}

describeWithService(
  'postgres',
  'forRootAsync + TypeOrmModule.forRootAsync + dataSourceToken, no @Inbox()',
  () => {
    const prefix = uniquePrefix('async');
    let admin: DataSource;
    beforeAll(async () => {
      admin = await new DataSource(dataSourceOptions('postgres')).initialize();
      // Production setup per docs/upgrading.md: the outbox migration ran, no inbox table (no @Inbox() in use).
      await ensureOutboxSchema(admin, { tablePrefix: prefix });
    });
    afterAll(async () => {
      for (const t of ['deliveries', 'events', 'schema_version', 'inbox'])
        await admin.query(`DROP TABLE IF EXISTS ${prefix}${t}`);
      await admin.destroy();
    });

    it('boots, delivers, and the inbox cleanup job does not fail every interval when @Inbox() is unused', async () => {
      const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
      const moduleRef = await Test.createTestingModule({
        imports: [
          ScheduleModule.forRoot(),
          TypeOrmModule.forRootAsync({ useFactory: () => dataSourceOptions('postgres') }),
          OutboxModule.forRootAsync({
            useFactory: () => ({
              store: {
                type: 'typeorm',
                dataSourceToken: getDataSourceToken(),
                tablePrefix: prefix,
                ensureSchema: false,
              },
              dispatcher: { pollInterval: 20 },
            }),
          }),
        ],
        providers: [Seen],
      }).compile();
      const app = moduleRef.createNestApplication({ logger: ['error', 'warn'] });
      await app.init();
      try {
        const ds = app.get(DataSource);
        const stored = await ds.transaction((manager) =>
          app.get(OutboxService).append({ type: 'order.placed', payload: { n: 1 } }, { manager }),
        );
        await app.get(OutboxDispatcher).drain();
        for (let i = 0; i < 100 && !app.get(Seen).ids.includes(stored.id); i++)
          await new Promise((r) => setTimeout(r, 20));
        expect(app.get(Seen).ids).toContain(stored.id);

        // The inbox retention job runs every 60 s in this app; run one pass now.
        let cleanupError: unknown;
        await app
          .get(InboxService)
          .cleanup()
          .catch((e) => (cleanupError = e));
        expect(cleanupError).toBeUndefined();
        // No @Inbox() and no inbox options: no inbox table was asked for, and no cleanup job runs.
        expect(app.get(SchedulerRegistry).doesExist('interval', INBOX_CLEANUP_INTERVAL)).toBe(
          false,
        );
      } finally {
        await app.close();
        warn.mockRestore();
      }
    });
  },
);
