import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import { DuplicateEventError } from '../../../lib/errors/duplicate-event.error';
import { OutboxValidationError } from '../../../lib/errors/outbox-validation.error';
import {
  AppendableEvent,
  HandlerSubscription,
} from '../../../lib/interfaces/outbox-store.interface';
import { TypeOrmOutboxStore } from '../../../lib/stores/typeorm/internal';
import { describeWithService } from '../../support/services';
import {
  openDataSource,
  SERVICE_OF,
  storeFor,
  TestDialect,
  uniquePrefix,
} from './typeorm-test-helpers';

const A: HandlerSubscription = { name: 'A.handle', types: ['order.placed'] };

function event(overrides: Partial<AppendableEvent> = {}): AppendableEvent {
  return {
    id: randomUUID(),
    type: 'order.placed',
    payload: { n: 1 },
    key: null,
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers: ['A.handle'],
    ...overrides,
  };
}

/** Appending inside the caller's transaction (SPEC §2.1) on each SQL database. */
function transactionsOn(dialect: TestDialect): void {
  let dataSource: DataSource;
  let store: TypeOrmOutboxStore;
  let tables: Awaited<ReturnType<typeof storeFor>>;
  let business: string;

  beforeAll(async () => {
    dataSource = await openDataSource(dialect);
    const prefix = uniquePrefix(`tx${dialect.slice(0, 2)}`);
    tables = await storeFor(dataSource, prefix);
    store = tables.store;
    business = `${prefix}orders`;
    await dataSource.query(`CREATE TABLE ${business} (id VARCHAR(64) PRIMARY KEY)`);
  });
  afterAll(async () => {
    await dataSource?.query(`DROP TABLE IF EXISTS ${business}`);
    await tables?.drop();
    await dataSource?.destroy();
  });
  beforeEach(async () => {
    await tables.empty();
    await dataSource.query(`DELETE FROM ${business}`);
  });

  const placeholder = dialect === 'postgres' ? '$1' : '?';
  const orders = async () =>
    ((await dataSource.query(`SELECT id FROM ${business}`)) as { id: string }[]).map((r) => r.id);
  const claimIds = async () =>
    (await store.claim({ workerId: 'w', handlers: [A], limit: 100, leaseMs: 30_000 })).map(
      (c) => c.event.id,
    );

  it('commits the event with the business write (dataSource.transaction)', async () => {
    const e = event();
    await dataSource.transaction(async (manager) => {
      await manager.query(`INSERT INTO ${business} (id) VALUES (${placeholder})`, ['o-1']);
      const [stored] = await store.append([e], { manager });
      expect(stored.id).toBe(e.id);
    });
    expect(await orders()).toEqual(['o-1']);
    expect(await claimIds()).toEqual([e.id]);
  });

  it('never delivers an event whose transaction rolled back', async () => {
    const e = event();
    await expect(
      dataSource.transaction(async (manager) => {
        await manager.query(`INSERT INTO ${business} (id) VALUES (${placeholder})`, ['o-2']);
        await store.append([e], { manager });
        throw new Error('business rule failed');
      }),
    ).rejects.toThrow('business rule failed');
    expect(await orders()).toEqual([]);
    expect(await claimIds()).toEqual([]);
    expect((await store.stats()).pending).toBe(0);
  });

  it('joins a transaction started on a QueryRunner (its manager or the runner itself)', async () => {
    const committed = [event(), event()];
    const runner = dataSource.createQueryRunner();
    await runner.startTransaction();
    await runner.query(`INSERT INTO ${business} (id) VALUES (${placeholder})`, ['o-3']);
    await store.append([committed[0]], { manager: runner.manager });
    await store.append([committed[1]], { manager: runner });
    await runner.commitTransaction();
    await runner.release();

    const rolledBack = dataSource.createQueryRunner();
    await rolledBack.startTransaction();
    await store.append([event()], { manager: rolledBack.manager });
    await rolledBack.rollbackTransaction();
    await rolledBack.release();

    expect(await orders()).toEqual(['o-3']);
    expect((await claimIds()).sort()).toEqual(committed.map((e) => e.id).sort());
  });

  it('rolls the business write back with a failed append', async () => {
    const existing = event();
    await store.append([existing]);
    await expect(
      dataSource.transaction(async (manager) => {
        await manager.query(`INSERT INTO ${business} (id) VALUES (${placeholder})`, ['o-4']);
        await store.append([event(), { ...existing, payload: { n: 2 } }], { manager });
      }),
    ).rejects.toBeInstanceOf(DuplicateEventError);
    expect(await orders()).toEqual([]);
    expect(await claimIds()).toEqual([existing.id]);
  });

  it('leaves the caller’s transaction usable after a refused append, with nothing of the batch written', async () => {
    const existing = event();
    await store.append([existing]);
    const other = event();
    await dataSource.transaction(async (manager) => {
      await manager.query(`INSERT INTO ${business} (id) VALUES (${placeholder})`, ['o-5']);
      await expect(
        store.append([other, { ...existing, payload: { n: 2 } }], { manager }),
      ).rejects.toBeInstanceOf(DuplicateEventError);
      await manager.query(`INSERT INTO ${business} (id) VALUES (${placeholder})`, ['o-6']);
    });
    expect((await orders()).sort()).toEqual(['o-5', 'o-6']);
    expect(await claimIds()).toEqual([existing.id]);
  });

  it('refuses a manager that is not inside a transaction, and says how to fix it', async () => {
    await expect(store.append([event()], { manager: dataSource.manager })).rejects.toBeInstanceOf(
      OutboxValidationError,
    );
    await expect(store.append([event()], { manager: dataSource.manager })).rejects.toThrow(
      /dataSource\.transaction/,
    );
    const idle = dataSource.createQueryRunner();
    try {
      await expect(store.append([event()], { manager: idle.manager })).rejects.toBeInstanceOf(
        OutboxValidationError,
      );
      await expect(store.append([event()], { manager: idle })).rejects.toBeInstanceOf(
        OutboxValidationError,
      );
    } finally {
      await idle.release();
    }
    expect(await claimIds()).toEqual([]);
  });

  it.each([
    ['an empty object', {}],
    ['a string', 'manager'],
    ['a repository', { manager: undefined, metadata: {}, find: () => [] }],
  ])('refuses %s as manager as not an EntityManager (or QueryRunner)', async (_what, manager) => {
    const error: unknown = await store.append([event()], { manager }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).field).toBe('options.manager');
    expect((error as Error).message).toMatch(/is not a TypeORM EntityManager \(or QueryRunner\)/);
    expect((error as Error).message).not.toMatch(/open transaction/);
    expect(await claimIds()).toEqual([]);
  });

  it("refuses the DataSource itself as manager, saying to pass the transaction's manager", async () => {
    const error: unknown = await store
      .append([event()], { manager: dataSource })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as Error).message).toMatch(
      /is a DataSource, not the EntityManager of an open transaction/,
    );
    expect(await claimIds()).toEqual([]);
  });

  it('without a manager, commits the batch in its own transaction', async () => {
    const batch = [event({ key: 'k' }), event({ key: 'k' }), event()];
    const stored = await store.append(batch);
    expect(stored.map((e) => e.id)).toEqual(batch.map((e) => e.id));
    expect(await claimIds()).toEqual([batch[0].id, batch[2].id]);
  });

  if (dialect !== 'sqlite') {
    it('lets concurrent transactions append without deadlocking each other', async () => {
      const batches = Array.from({ length: 10 }, (_, b) =>
        Array.from({ length: 20 }, (_, i) => event({ key: i % 3 ? null : `k${b}` })),
      );
      await Promise.all(
        batches.map((batch, b) =>
          dataSource.transaction(async (manager) => {
            await manager.query(`INSERT INTO ${business} (id) VALUES (${placeholder})`, [`c-${b}`]);
            for (let i = 0; i < batch.length; i += 5)
              await store.append(batch.slice(i, i + 5), { manager });
          }),
        ),
      );
      expect(await orders()).toHaveLength(10);
      expect((await store.stats()).pending).toBe(200);
    });

    it('treats the same event appended concurrently by two transactions as one', async () => {
      const e = event();
      await Promise.all(
        [1, 2, 3].map(() => dataSource.transaction((manager) => store.append([e], { manager }))),
      );
      expect((await store.stats()).pending).toBe(1);
    });

    // SQLite has one connection, so "another connection" cannot look in while the transaction is open.
    it('keeps the event invisible to claimers until commit', async () => {
      const e = event();
      const runner = dataSource.createQueryRunner();
      await runner.startTransaction();
      try {
        await store.append([e], { manager: runner.manager });
        expect(await claimIds()).toEqual([]);
        await runner.commitTransaction();
      } finally {
        await runner.release();
      }
      expect(await claimIds()).toEqual([e.id]);
    });
  }
}

describe('typeorm append in transactions [sqlite]', () => {
  transactionsOn('sqlite');

  it('waits for an open application transaction instead of running inside it', async () => {
    const dataSource = await openDataSource('sqlite');
    try {
      const { store } = await storeFor(dataSource, uniquePrefix('txw'));
      const runner = dataSource.createQueryRunner();
      await runner.startTransaction();
      const e = event();
      await store.append([e], { manager: runner.manager });
      let settled = false;
      const claiming = store
        .claim({ workerId: 'w', handlers: [A], limit: 10, leaseMs: 30_000 })
        .finally(() => {
          settled = true;
        });
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(settled).toBe(false);
      await runner.commitTransaction();
      await runner.release();
      expect((await claiming).map((c) => c.event.id)).toEqual([e.id]);
    } finally {
      await dataSource.destroy();
    }
  });
});
describeWithService(SERVICE_OF.postgres, 'typeorm append in transactions', () =>
  transactionsOn('postgres'),
);
describeWithService(SERVICE_OF.mariadb, 'typeorm append in transactions', () =>
  transactionsOn('mariadb'),
);
