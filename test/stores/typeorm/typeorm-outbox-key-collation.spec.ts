import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import { HandlerSubscription } from '../../../lib/interfaces/outbox-store.interface';
import {
  ensureOutboxSchema,
  outboxSchemaStatus,
  OUTBOX_SCHEMA_VERSION,
  TypeOrmOutboxStore,
} from '../../../lib/stores/typeorm';
import { createDialect } from '../../../lib/stores/typeorm/dialects';
import { describeWithService } from '../../support/services';
import { openDataSource, SERVICE_OF, TestDialect, uniquePrefix } from './typeorm-test-helpers';

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
      const [{ c }] = await ds.query(
        `SELECT COLLATION_NAME AS c FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'event_key'`,
        [`${tablePrefix}deliveries`],
      );
      expect(c).toBe('utf8mb4_bin');
      await ensureOutboxSchema(ds, { tablePrefix });
      await ensureOutboxSchema(ds, { tablePrefix });
      expect(await outboxSchemaStatus(ds, { tablePrefix })).toMatchObject({
        current: OUTBOX_SCHEMA_VERSION,
        upToDate: true,
      });
      await keysStayApart(new TypeOrmOutboxStore(ds, { tablePrefix }));
    });
  }
}

describe('typeorm key collation on sqlite', () => on('sqlite'));
describeWithService(SERVICE_OF.postgres, 'typeorm key collation', () => on('postgres'));
describeWithService(SERVICE_OF.mariadb, 'typeorm key collation', () => on('mariadb'));
