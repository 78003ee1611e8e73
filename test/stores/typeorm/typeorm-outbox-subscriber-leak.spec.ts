import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { OutboxHandler, OutboxModule, OutboxService } from 'nestjs-outbox';
import { openDataSource, uniquePrefix } from './typeorm-test-helpers';

/**
 * A DataSource shared across app instances (one DataSource per test file, one Nest app per test)
 * must not collect the stores' afterTransactionCommit subscribers: each app's store removes its
 * own when its dispatcher stops listening.
 */
describe('typeorm: onAppended subscriber across app restarts', () => {
  let ds: DataSource;
  const prefix = uniquePrefix('leak');
  beforeAll(async () => {
    ds = await openDataSource('sqlite');
  });
  afterAll(async () => {
    await ds.destroy();
  });

  @Injectable()
  class H {
    @OutboxHandler('leak.t')
    handle() {}
  }

  async function runApp() {
    const moduleRef = await Test.createTestingModule({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: { type: 'typeorm', dataSource: ds, tablePrefix: prefix, ensureSchema: true },
          dispatcher: { pollInterval: 60_000 },
        }),
      ],
      providers: [H],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    await ds.transaction((manager) =>
      app.get(OutboxService).append({ type: 'leak.t', payload: {} }, { manager }),
    );
    await app.close();
  }

  it('leaves the DataSource subscribers as they were after each app closes', async () => {
    const before = ds.subscribers.length;
    for (let i = 0; i < 5; i++) await runApp();
    expect(ds.subscribers.length).toBe(before);
  });
});
