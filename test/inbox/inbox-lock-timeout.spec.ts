import { DataSource } from 'typeorm';
import { InboxInProgressError } from 'nestjs-outbox';
import { InboxStore } from '../../lib/inbox/inbox.store';
import { describeWithService } from '../support/services';
import {
  InboxTestDialect,
  inboxDataSourceOptions,
  inboxTable,
  uniquePrefix,
} from './inbox-test-helpers';

const POOL = 4;

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** Rejects when `promise` has not settled after `ms`, so a pinned pool fails the test, not jest. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([
    promise,
    new Promise<T>((_, reject) =>
      setTimeout(() => reject(new Error(`${what} still waiting after ${ms} ms`)), ms).unref(),
    ),
  ]);
}

function lockTimeoutSemantics(dialect: Exclude<InboxTestDialect, 'sqlite'>) {
  let dataSource: DataSource;
  let store: InboxStore;
  const prefix = uniquePrefix('inboxlock');

  beforeAll(async () => {
    const options = inboxDataSourceOptions(dialect);
    const pool = dialect === 'postgres' ? { max: POOL } : { connectionLimit: POOL };
    dataSource = await new DataSource({ ...options, extra: pool } as typeof options).initialize();
    store = new InboxStore(dataSource, { tablePrefix: prefix });
    await store.ensureSchema();
  });

  afterAll(async () => {
    await inboxTable(dataSource, prefix).drop();
    await dataSource?.destroy();
  });

  it(`duplicates of a message being processed give up after lockTimeoutMs with InboxInProgressError instead of pinning the pool (${POOL} connections, ${POOL * 2} duplicates)`, async () => {
    const release = deferred();
    const started = deferred();
    const first = store.run('c', 'busy', async () => {
      started.resolve();
      await release.promise;
      return 'first';
    });
    await started.promise;

    const startedAt = Date.now();
    const duplicates = Array.from({ length: POOL * 2 }, () =>
      store
        .run('c', 'busy', async () => 'dup', { lockTimeoutMs: 1_000 })
        .then(
          () => null,
          (error: unknown) => error,
        ),
    );
    const errors = await within(Promise.all(duplicates), 15_000, 'duplicates');
    for (const error of errors) {
      expect(error).toBeInstanceOf(InboxInProgressError);
      expect(error).toMatchObject({ consumer: 'c', messageId: 'busy' });
    }
    expect(Date.now() - startedAt).toBeLessThan(12_000);

    // The pool is free again: another message runs while the first is still open.
    await expect(
      within(
        store.run('c', 'other', async () => 'other', { lockTimeoutMs: 1_000 }),
        5_000,
        'other',
      ),
    ).resolves.toEqual({ duplicate: false, value: 'other' });

    release.resolve();
    await expect(first).resolves.toEqual({ duplicate: false, value: 'first' });
    // Once the first committed, a redelivery is an ordinary duplicate.
    await expect(
      store.run('c', 'busy', async () => 'late', { lockTimeoutMs: 1_000 }),
    ).resolves.toEqual({ duplicate: true });
  });

  it('the lock timeout applies to the claim only: the session setting is restored for the work and the pool', async () => {
    const read =
      dialect === 'postgres'
        ? "SELECT current_setting('lock_timeout') AS v"
        : 'SELECT @@SESSION.innodb_lock_wait_timeout AS v';
    const before = (await dataSource.query(read))[0].v;
    const seen = await store.run(
      'c',
      'restore',
      async (manager) => (await manager.query(read))[0].v,
      { lockTimeoutMs: 1_000 },
    );
    expect(seen).toEqual({ duplicate: false, value: before });
    // Every pooled connection still has the server default.
    const values = await Promise.all(
      Array.from({ length: POOL }, () => dataSource.query(read).then((rows) => rows[0].v)),
    );
    expect(new Set(values)).toEqual(new Set([before]));
  });
}

describeWithService('postgres', 'inbox claim lock timeout', () => lockTimeoutSemantics('postgres'));
describeWithService('mariadb', 'inbox claim lock timeout', () => lockTimeoutSemantics('mariadb'));
