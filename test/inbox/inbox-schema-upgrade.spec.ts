import { DataSource } from 'typeorm';
import { createInboxFingerprintMigration, createInboxMigration } from 'nestjs-outbox';
import { InboxStore } from '../../lib/inbox/inbox.store';
import { describeWithService } from '../support/services';
import {
  INBOX_VERSION_1,
  InboxTestDialect,
  inboxTable,
  openInboxDataSource,
  uniquePrefix,
} from './inbox-test-helpers';

function upgradeSemantics(dialect: InboxTestDialect) {
  let dataSource: DataSource;
  let prefix: string;
  let table: ReturnType<typeof inboxTable>;

  beforeAll(async () => {
    dataSource = await openInboxDataSource(dialect);
  });
  afterAll(async () => dataSource?.destroy());

  beforeEach(async () => {
    prefix = uniquePrefix('inboxv1');
    table = inboxTable(dataSource, prefix);
    await dataSource.query(INBOX_VERSION_1[dialect](table.table));
    const now = dialect === 'postgres' ? 'now()' : dialect === 'mariadb' ? 'UTC_TIMESTAMP(3)' : '0';
    await dataSource.query(
      `INSERT INTO ${table.table} (consumer, message_id, processed_at) VALUES ('c', 'old', ${now})`,
    );
  });
  afterEach(async () => table.drop());

  it('with ensureSchema: false, a version 1 table fails the check naming the migration to run', async () => {
    await expect(
      new InboxStore(dataSource, { tablePrefix: prefix }).assertSchema(),
    ).rejects.toThrow(/schema version 1 .*createInboxFingerprintMigration\(\)/);
  });

  it('ensureSchema upgrades version 1 to 2 in place, keeping the records; twice is harmless', async () => {
    const store = new InboxStore(dataSource, { tablePrefix: prefix });
    await store.ensureSchema();
    await store.ensureSchema();
    await store.assertSchema();
    expect(await table.count('c', 'old')).toBe(1);
    // The old record is still a duplicate, and new records carry a fingerprint.
    await expect(store.run('c', 'old', async () => 1, { fingerprint: 'f' })).resolves.toEqual({
      duplicate: true,
    });
    await store.run('c', 'new', async () => 1, { fingerprint: 'f1' });
    await expect(store.run('c', 'new', async () => 1, { fingerprint: 'f2' })).rejects.toThrow(
      /already used for a different request/,
    );
  });

  it('createInboxFingerprintMigration() upgrades a table made by createInboxMigration() v1, and reverts', async () => {
    const Upgrade = createInboxFingerprintMigration({ tablePrefix: prefix });
    const runner = dataSource.createQueryRunner();
    try {
      await new Upgrade().up(runner);
      await new InboxStore(dataSource, { tablePrefix: prefix }).assertSchema();
      expect(await runner.hasColumn(`${prefix}inbox`, 'fingerprint')).toBe(true);
      // Running it again (or on a table the current createInboxMigration() made) changes nothing.
      await new Upgrade().up(runner);
      await new Upgrade().down(runner);
      expect(await runner.hasColumn(`${prefix}inbox`, 'fingerprint')).toBe(false);
      expect(await table.count('c', 'old')).toBe(1);
    } finally {
      await runner.release();
    }
  });

  it('createInboxMigration() then createInboxFingerprintMigration() on an empty database', async () => {
    await table.drop();
    const runner = dataSource.createQueryRunner();
    try {
      await new (createInboxMigration({ tablePrefix: prefix }))().up(runner);
      await new (createInboxFingerprintMigration({ tablePrefix: prefix }))().up(runner);
      await new InboxStore(dataSource, { tablePrefix: prefix }).assertSchema();
    } finally {
      await runner.release();
    }
  });
}

describe('inbox schema version 1 → 2 [sqlite]', () => upgradeSemantics('sqlite'));
describeWithService('postgres', 'inbox schema version 1 → 2', () => upgradeSemantics('postgres'));
describeWithService('mariadb', 'inbox schema version 1 → 2', () => upgradeSemantics('mariadb'));
