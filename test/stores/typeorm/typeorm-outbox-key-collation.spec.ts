import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import { HandlerSubscription } from '../../../lib/interfaces/outbox-store.interface';
import {
  ensureOutboxSchema,
  NestjsOutboxSchema1780000000000,
  NestjsOutboxSchema1781000000000,
  NestjsOutboxSchema1782000000000,
  outboxSchemaStatus,
  OUTBOX_SCHEMA_VERSION,
  TypeOrmOutboxStore,
} from '../../../lib/stores/typeorm/internal';
import { createDialect } from '../../../lib/stores/typeorm/dialects';
import { describeWithService } from '../../support/services';
import {
  dataSourceOptions,
  openDataSource,
  SERVICE_OF,
  TestDialect,
  uniquePrefix,
} from './typeorm-test-helpers';

const A: HandlerSubscription = { name: 'A.handle', types: ['k.event'] };

const event = (key: string, type = 'k.event') => ({
  id: randomUUID(),
  type,
  key,
  payload: { key },
  headers: {},
  occurredAt: new Date(),
  availableAt: null,
  handlers: ['A.handle'],
});

/**
 * Keys are compared exactly, as in JavaScript: `"a"` and `"a "` are two keys. A PAD SPACE
 * collation (MariaDB/MySQL `utf8mb4_bin`) would make them one, so they would share per-key order
 * and dead-letter filters.
 */
async function keysStayApart(store: TypeOrmOutboxStore): Promise<void> {
  const first = event('a');
  const second = event('a ');
  await store.append([first, second]);
  // "a" is open: "a " must not wait behind it.
  const claimed = await store.claim({ workerId: 'w', handlers: [A], limit: 10, leaseMs: 60_000 });
  expect(claimed.map((c) => [c.event.id, c.event.key])).toEqual([
    [first.id, 'a'],
    [second.id, 'a '],
  ]);
  for (const c of claimed) {
    await store.deadLetter(c.lease, 'rejected', {
      name: 'Error',
      message: 'no',
      attempt: 1,
      workerId: 'w',
    });
  }
  expect((await store.listDeadLetters({ limit: 10, key: 'a' })).items.map((d) => d.key)).toEqual([
    'a',
  ]);
  expect(await store.replay({ filter: { key: 'a ' } })).toBe(1);
  const again = await store.claim({ workerId: 'w', handlers: [A], limit: 10, leaseMs: 60_000 });
  expect(again.map((c) => c.event.key)).toEqual(['a ']);
}

function on(dialect: TestDialect): void {
  let ds: DataSource;
  const prefixes: string[] = [];

  beforeAll(async () => {
    ds = await openDataSource(dialect);
  }, 60_000);
  afterAll(async () => {
    for (const tablePrefix of prefixes) {
      for (const ddl of createDialect(ds, { tablePrefix }).dropSchema()) await ds.query(ddl);
    }
    await ds?.destroy();
  });

  it('keeps keys that differ only by trailing spaces apart', async () => {
    const tablePrefix = uniquePrefix(`kc${dialect.slice(0, 2)}`);
    prefixes.push(tablePrefix);
    await ensureOutboxSchema(ds, { tablePrefix });
    await keysStayApart(new TypeOrmOutboxStore(ds, { tablePrefix }));
  });

  if (dialect === 'mariadb') {
    it('brings version-2 tables (PAD SPACE utf8mb4_bin) forward', async () => {
      const tablePrefix = uniquePrefix('kcup');
      prefixes.push(tablePrefix);
      const d = createDialect(ds, { tablePrefix });
      // Version 2 as released: every text column in utf8mb4_bin.
      for (const ddl of d.createSchema()) {
        await ds.query(ddl.replace(/utf8mb4_(nopad_bin|0900_bin)/g, 'utf8mb4_bin'));
      }
      await ds.query(`INSERT INTO ${d.tables.version.text} (version) VALUES (2)`);
      expect(await keyCollation(ds, `${tablePrefix}deliveries`)).toBe('utf8mb4_bin');
      await ensureOutboxSchema(ds, { tablePrefix });
      await ensureOutboxSchema(ds, { tablePrefix });
      expect(await outboxSchemaStatus(ds, { tablePrefix })).toMatchObject({
        current: OUTBOX_SCHEMA_VERSION,
        upToDate: true,
      });
      expect(await keyCollation(ds, `${tablePrefix}deliveries`)).toBe('utf8mb4_nopad_bin');
      await keysStayApart(new TypeOrmOutboxStore(ds, { tablePrefix }));
    });
  }
}

const keyCollation = async (ds: DataSource, table: string): Promise<string> => {
  const [{ c }] = await ds.query(
    `SELECT COLLATION_NAME AS c FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'event_key'`,
    [table],
  );
  return c;
};

function migrationOn(): void {
  it('NestjsOutboxSchema1782000000000 brings version-2 tables forward as a migration', async () => {
    const ds = await new DataSource({
      ...dataSourceOptions('mariadb'),
      migrations: [
        NestjsOutboxSchema1780000000000,
        NestjsOutboxSchema1781000000000,
        NestjsOutboxSchema1782000000000,
      ],
      migrationsTableName: `${uniquePrefix('mig')}migrations`,
    }).initialize();
    const d = createDialect(ds, {});
    const table = ds.options.migrationsTableName!;
    try {
      for (const ddl of d.dropSchema()) await ds.query(ddl);
      for (const ddl of d.createSchema()) {
        await ds.query(ddl.replace(/utf8mb4_(nopad_bin|0900_bin)/g, 'utf8mb4_bin'));
      }
      await ds.query(`INSERT INTO ${d.tables.version.text} (version) VALUES (2)`);
      await ds.query(
        `CREATE TABLE ${table} (id INT AUTO_INCREMENT PRIMARY KEY, timestamp BIGINT NOT NULL, name VARCHAR(255) NOT NULL)`,
      );
      await ds.query(
        `INSERT INTO ${table} (timestamp, name) VALUES (1780000000000, 'NestjsOutboxSchema1780000000000'), (1781000000000, 'NestjsOutboxSchema1781000000000')`,
      );
      expect(await ds.runMigrations({ transaction: 'each' })).toHaveLength(1);
      expect(await outboxSchemaStatus(ds)).toMatchObject({ current: 3, upToDate: true });
      expect(await keyCollation(ds, 'outbox_deliveries')).toBe('utf8mb4_nopad_bin');
    } finally {
      for (const ddl of d.dropSchema()) await ds.query(ddl);
      await ds.query(`DROP TABLE IF EXISTS ${table}`);
      await ds.destroy();
    }
  });
}

describe('typeorm key collation on sqlite', () => on('sqlite'));
describeWithService(SERVICE_OF.postgres, 'typeorm key collation', () => on('postgres'));
describeWithService(SERVICE_OF.mariadb, 'typeorm key collation', () => {
  on('mariadb');
  migrationOn();
});
