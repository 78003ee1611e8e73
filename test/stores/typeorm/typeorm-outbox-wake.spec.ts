import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { AppendableEvent } from 'nestjs-outbox';
import { describeWithService } from '../../support/services';
import {
  openDataSource,
  SERVICE_OF,
  storeFor,
  TestDialect,
  uniquePrefix,
} from './typeorm-test-helpers';

const event = (): AppendableEvent => ({
  id: randomUUID(),
  type: 't.wake',
  payload: {},
  key: null,
  headers: {},
  occurredAt: new Date(),
  availableAt: null,
  handlers: ['H'],
});

function wakeSuite(dialect: TestDialect) {
  let ds: DataSource;
  let h: Awaited<ReturnType<typeof storeFor>>;
  beforeAll(async () => {
    ds = await openDataSource(dialect);
    h = await storeFor(ds, uniquePrefix('wake'));
  });
  afterAll(async () => {
    await h.drop();
    await ds.destroy();
  });

  it('tells listeners after the store’s own transaction commits', async () => {
    let calls = 0;
    const off = h.store.onAppended(() => calls++);
    await h.store.append([event()]);
    expect(calls).toBe(1);
    off();
  });

  it('tells listeners only when the caller’s transaction commits, never on rollback', async () => {
    let calls = 0;
    const off = h.store.onAppended(() => calls++);
    await ds.transaction(async (manager) => {
      await h.store.append([event()], { manager });
      expect(calls).toBe(0);
    });
    expect(calls).toBe(1);
    await ds
      .transaction(async (manager) => {
        await h.store.append([event()], { manager });
        throw new Error('roll back');
      })
      .catch(() => undefined);
    expect(calls).toBe(1);
    const runner = ds.createQueryRunner();
    await runner.connect();
    await runner.startTransaction();
    await h.store.append([event()], { manager: runner.manager });
    expect(calls).toBe(1);
    await runner.commitTransaction();
    await runner.release();
    expect(calls).toBe(2);
    off();
  });
}

describe('typeorm: onAppended [sqlite]', () => wakeSuite('sqlite'));
for (const dialect of ['postgres', 'mariadb'] as const) {
  describeWithService(SERVICE_OF[dialect], `typeorm: onAppended [${dialect}]`, () =>
    wakeSuite(dialect),
  );
}
