import { DataSource, Logger, QueryRunner } from 'typeorm';
import { InboxInProgressError } from 'nestjs-outbox';
import { InboxStore } from '../../lib/inbox/inbox.store';
import { mysqlInboxDialect } from '../../lib/inbox/dialects/mysql';
import { describeWithService } from '../support/services';
import {
  InboxTestDialect,
  inboxDataSourceOptions,
  inboxTable,
  uniquePrefix,
} from './inbox-test-helpers';

const POOL = 2;
const WORK = 'SELECT 42 AS inbox_work_marker';

/** Every statement TypeORM sends on this DataSource while `recording` is on, with its runner. */
class StatementLog implements Logger {
  recording = false;
  readonly sent: { sql: string; runner?: QueryRunner }[] = [];
  logQuery(sql: string, _params?: unknown[], runner?: QueryRunner): void {
    if (this.recording) this.sent.push({ sql, runner });
  }
  logQueryError(): void {}
  logQuerySlow(): void {}
  logSchemaBuild(): void {}
  logMigration(): void {}
  log(): void {}

  async during(work: () => Promise<unknown>): Promise<string[]> {
    this.sent.length = 0;
    this.recording = true;
    try {
      await work();
    } finally {
      this.recording = false;
    }
    return this.sent.map((s) => s.sql);
  }
}

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

function claimStatements(dialect: Exclude<InboxTestDialect, 'sqlite'>) {
  let dataSource: DataSource;
  let store: InboxStore;
  const log = new StatementLog();
  const prefix = uniquePrefix('inboxstmt');
  // A session setting no server ships with, put on every pooled connection: the claim's short
  // bound must not leak into the work, and the session's own value must come back.
  const read =
    dialect === 'postgres'
      ? "SELECT current_setting('lock_timeout') AS v"
      : 'SELECT @@SESSION.innodb_lock_wait_timeout AS v';
  const distinctive = dialect === 'postgres' ? '4321ms' : '37';
  const setDistinctive =
    dialect === 'postgres'
      ? `SET lock_timeout = '${distinctive}'`
      : `SET SESSION innodb_lock_wait_timeout = ${distinctive}`;

  beforeAll(async () => {
    const options = inboxDataSourceOptions(dialect);
    const pool = dialect === 'postgres' ? { max: POOL } : { connectionLimit: POOL };
    dataSource = await new DataSource({
      ...options,
      extra: pool,
      logger: log,
    } as typeof options).initialize();
    store = new InboxStore(dataSource, { tablePrefix: prefix });
    await store.ensureSchema();
    const runners = Array.from({ length: POOL }, () => dataSource.createQueryRunner('master'));
    await Promise.all(runners.map((runner) => runner.query(setDistinctive)));
    await Promise.all(runners.map((runner) => runner.release()));
    // First run: whatever the store learns about the server once is not counted below.
    await store.run('c', 'warm-up', async () => undefined);
  });

  afterAll(async () => {
    await inboxTable(dataSource, prefix).drop();
    await dataSource?.destroy();
  });

  it('a run sends BEGIN, one claim statement and COMMIT besides the work (a raw claim: the same)', async () => {
    const sent = await log.during(() =>
      store.run('c', 'count-me', async (manager) => manager.query(WORK)),
    );
    const inbox = sent.filter((sql) => sql !== WORK);
    expect(sent).toContain(WORK);
    expect(inbox).toHaveLength(3);
    expect(inbox[0]).toMatch(/^(START TRANSACTION|BEGIN)/);
    expect(inbox[2]).toBe('COMMIT');

    const duplicate = await log.during(() =>
      store.run('c', 'count-me', async (manager) => manager.query(WORK)),
    );
    expect(duplicate).not.toContain(WORK);
    expect(duplicate).toHaveLength(3);
    expect(duplicate[2]).toBe('ROLLBACK');
  });

  it("the work and the pool see the session's own lock timeout after a claim", async () => {
    const seen = await store.run(
      'c',
      'restore',
      async (manager) => String((await manager.query(read))[0].v),
      { lockTimeoutMs: 1_000 },
    );
    expect(seen).toEqual({ duplicate: false, value: distinctive });
    const values = await Promise.all(
      Array.from({ length: POOL }, () => dataSource.query(read).then((rows) => String(rows[0].v))),
    );
    expect(values).toEqual(Array(POOL).fill(distinctive));
  });

  it('a duplicate waiting on an uncommitted claim gives up after lockTimeoutMs, not the session timeout', async () => {
    const release = deferred();
    const started = deferred();
    const first = store.run('c', 'held', async () => {
      started.resolve();
      await release.promise;
      return 'first';
    });
    await started.promise;
    try {
      const startedAt = Date.now();
      // MariaDB counts whole seconds: 1 s there, 300 ms on PostgreSQL; the session has 4.3 s / 37 s.
      const error = await store
        .run('c', 'held', async () => 'dup', { lockTimeoutMs: 300 })
        .then(
          () => null,
          (e: unknown) => e,
        );
      const waited = Date.now() - startedAt;
      expect(error).toBeInstanceOf(InboxInProgressError);
      expect(error).toMatchObject({ consumer: 'c', messageId: 'held', lockTimeoutMs: 300 });
      expect(waited).toBeGreaterThanOrEqual(250);
      expect(waited).toBeLessThan(dialect === 'postgres' ? 3_000 : 4_000);
    } finally {
      release.resolve();
    }
    await expect(first).resolves.toEqual({ duplicate: false, value: 'first' });
    // The failed claim left the session's own value on its connection.
    const values = await Promise.all(
      Array.from({ length: POOL }, () => dataSource.query(read).then((rows) => String(rows[0].v))),
    );
    expect(values).toEqual(Array(POOL).fill(distinctive));
  });

  it("a duplicate that waited and then took the key (the first rolled back) runs with the session's own setting", async () => {
    const release = deferred();
    const started = deferred();
    const first = store.run('c', 'rolled-back', async () => {
      started.resolve();
      await release.promise;
      throw new Error('first fails');
    });
    await started.promise;
    const second = store.run(
      'c',
      'rolled-back',
      async (manager) => String((await manager.query(read))[0].v),
      { lockTimeoutMs: 5_000 },
    );
    // Let the second reach its wait on the first's uncommitted record, then roll the first back.
    await new Promise((resolve) => setTimeout(resolve, 150));
    release.resolve();
    await expect(first).rejects.toThrow('first fails');
    await expect(second).resolves.toEqual({ duplicate: false, value: distinctive });
  });
}

describe('inbox claim on MySQL and MariaDB', () => {
  const t = mysqlInboxDialect.tableNames('outbox_');
  it('MariaDB sets the bound for the claim statement alone; MySQL sends it and its restore around the claim', () => {
    const pick = mysqlInboxDialect.forServer!.pick;
    const maria = pick([{ version: '10.11.19-MariaDB-0+deb12u1' }]).claim(t, 'c', 'm', null, 1_500);
    expect(maria.bound).toBeUndefined();
    expect(maria.restore).toBeUndefined();
    expect(maria.claim.sql).toMatch(
      /^SET STATEMENT innodb_lock_wait_timeout = 2 FOR INSERT IGNORE/,
    );
    const mysql = pick([{ version: '8.4.3' }]).claim(t, 'c', 'm', null, 1_500);
    expect(mysql.bound?.params).toEqual([2]);
    expect(mysql.restore).toBeDefined();
    expect(mysql.claim.sql).toMatch(/^INSERT IGNORE/);
  });
});

describeWithService('postgres', 'inbox claim: statements and bounded wait', () =>
  claimStatements('postgres'),
);
describeWithService('mariadb', 'inbox claim: statements and bounded wait', () =>
  claimStatements('mariadb'),
);
