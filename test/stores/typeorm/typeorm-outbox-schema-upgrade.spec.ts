import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import { HandlerSubscription } from '../../../lib/interfaces/outbox-store.interface';
import {
  ensureOutboxSchema,
  NestjsOutboxSchema1780000000000,
  NestjsOutboxSchema1781000000000,
  outboxSchemaStatus,
  OUTBOX_SCHEMA_VERSION,
  TypeOrmOutboxStore,
} from '../../../lib/stores/typeorm/internal';
import { createDialect } from '../../../lib/stores/typeorm/dialects';
import { describeWithService } from '../../support/services';
import { schemaV1 } from './fixtures-schema-v1';
import {
  dataSourceOptions,
  openDataSource,
  SERVICE_OF,
  TestDialect,
  uniquePrefix,
} from './typeorm-test-helpers';

const A: HandlerSubscription = { name: 'A.handle', types: ['up.event'] };

/**
 * Tables created by release 0.1.0 (schema 1: delivered and dead rows in `deliveries`) are brought
 * to the current schema by `ensureOutboxSchema` (every step, versions 2 and 3): dead letters move to their table with their history,
 * delivered rows leave the open table, open work is untouched and still claimable.
 */
function upgradeOn(dialect: TestDialect): void {
  let ds: DataSource;
  let prefix: string;

  beforeAll(async () => {
    ds = await openDataSource(dialect);
    prefix = uniquePrefix(`up${dialect.slice(0, 2)}`);
  }, 60_000);
  afterAll(async () => {
    const d = createDialect(ds, { tablePrefix: prefix });
    for (const ddl of d.dropSchema()) await ds.query(ddl);
    await ds.destroy();
  });

  it('upgrades version-1 tables with delivered, dead and open deliveries', async () => {
    const d = createDialect(ds, { tablePrefix: prefix });
    const t = d.tables;
    for (const ddl of schemaV1(d.name, t)) await ds.query(ddl);
    const store = new TypeOrmOutboxStore(ds, { tablePrefix: prefix });
    // Version-1 rows, written as release 0.1.0 wrote them.
    const ids = [randomUUID(), randomUUID(), randomUUID()];
    const time = (iso: string) =>
      d.name === 'sqlite'
        ? new Date(iso).getTime()
        : d.name === 'mysql'
          ? iso.replace('T', ' ').replace('Z', '')
          : iso;
    const at = time('2026-01-01T00:00:00.000Z');
    const q = (text: string, params: unknown[]) =>
      ds.query(d.name === 'postgres' ? text.replace(/\?/g, () => `$${++n}`) : text, params);
    let n = 0;
    for (const [i, id] of ids.entries()) {
      n = 0;
      await q(
        `INSERT INTO ${t.events.text} (seq, id, type, event_key, payload, headers, occurred_at, available_at) VALUES (?, ?, 'up.event', 'k', '{"i":${i}}', '{}', ?, ?)`,
        [i + 1, id, at, at],
      );
    }
    const errors = JSON.stringify([
      { name: 'Error', message: 'boom', attempt: 3, workerId: 'w', at: 1 },
    ]);
    const delivery = (seq: number, status: string, extra: string, values: unknown[]) => {
      n = 0;
      return q(
        `INSERT INTO ${t.deliveries.text} (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors${extra}) VALUES (?, ?, 'up.event', 'k', 'A.handle', ?, 3, ?, ?${values.map(() => ', ?').join('')})`,
        [randomUUID(), seq, status, at, errors, ...values],
      );
    };
    await delivery(1, 'delivered', ', done_at', [at]);
    const deadId = randomUUID();
    n = 0;
    await q(
      `INSERT INTO ${t.deliveries.text} (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors, reason, done_at) VALUES (?, 2, 'up.event', 'k', 'A.handle', 'dead', 3, ?, ?, 'exhausted', ?)`,
      [deadId, at, errors, at],
    );
    await delivery(3, 'pending', '', []);
    await ds.query(`INSERT INTO ${t.version.text} (version) VALUES (1)`);
    expect(await outboxSchemaStatus(ds, { tablePrefix: prefix })).toMatchObject({
      current: 1,
      upToDate: false,
    });

    await ensureOutboxSchema(ds, { tablePrefix: prefix });
    // Idempotent: a second replica (or a second run) changes nothing.
    await ensureOutboxSchema(ds, { tablePrefix: prefix });

    expect(await outboxSchemaStatus(ds, { tablePrefix: prefix })).toMatchObject({
      current: OUTBOX_SCHEMA_VERSION,
      upToDate: true,
    });
    const dead = await store.getDeadLetter(deadId);
    expect(dead).toMatchObject({
      eventId: ids[1],
      reason: 'exhausted',
      attempts: 3,
      errors: [expect.objectContaining({ message: 'boom' })],
    });
    expect(await store.stats()).toMatchObject({ pending: 1, leased: 0, dead: 1 });
    const open = await ds.query(`SELECT status FROM ${t.deliveries.text}`);
    expect(open).toHaveLength(1);
    // The open delivery waits for the dead one's key? No: a dead letter releases its key.
    const claimed = await store.claim({ workerId: 'w', handlers: [A], limit: 10, leaseMs: 60_000 });
    expect(claimed.map((c) => c.event.id)).toEqual([ids[2]]);
    await store.ack(claimed[0].lease);
    // Replayed, the old dead letter is open work again, in its place in the key's order.
    expect(await store.replay({ ids: [deadId] })).toBe(1);
    const again = await store.claim({ workerId: 'w', handlers: [A], limit: 10, leaseMs: 60_000 });
    expect(again.map((c) => c.event.id)).toEqual([ids[1]]);
  });
}

function migrationOn(dialect: TestDialect): void {
  it('NestjsOutboxSchema1781000000000 upgrades version-1 tables as a TypeORM migration', async () => {
    const ds = await new DataSource({
      ...dataSourceOptions(dialect),
      migrations: [NestjsOutboxSchema1780000000000, NestjsOutboxSchema1781000000000],
      migrationsTableName: `${uniquePrefix('mig')}migrations`,
    }).initialize();
    const d = createDialect(ds, {});
    try {
      for (const ddl of d.dropSchema()) await ds.query(ddl);
      // A database that ran release 0.1's migration: version-1 tables, the first migration recorded.
      for (const ddl of schemaV1(d.name, d.tables)) await ds.query(ddl);
      await ds.query(`INSERT INTO ${d.tables.version.text} (version) VALUES (1)`);
      const table = ds.options.migrationsTableName!;
      await ds.query(
        `CREATE TABLE ${table} (id ${d.name === 'sqlite' ? 'INTEGER PRIMARY KEY AUTOINCREMENT' : 'SERIAL PRIMARY KEY'}, timestamp BIGINT NOT NULL, name VARCHAR(255) NOT NULL)`,
      );
      await ds.query(
        `INSERT INTO ${table} (timestamp, name) VALUES (1780000000000, 'NestjsOutboxSchema1780000000000')`,
      );
      expect((await outboxSchemaStatus(ds)).current).toBe(1);
      expect(await ds.runMigrations({ transaction: 'each' })).toHaveLength(1);
      expect(await outboxSchemaStatus(ds)).toMatchObject({
        current: OUTBOX_SCHEMA_VERSION,
        upToDate: true,
      });
      const store = new TypeOrmOutboxStore(ds);
      await store.append([
        {
          id: randomUUID(),
          type: 'up.event',
          key: null,
          payload: {},
          headers: {},
          occurredAt: new Date(),
          availableAt: null,
          handlers: ['A.handle'],
        },
      ]);
      expect(await store.stats()).toMatchObject({ pending: 1, dead: 0 });
    } finally {
      for (const ddl of d.dropSchema()) await ds.query(ddl);
      await ds.query(`DROP TABLE IF EXISTS ${ds.options.migrationsTableName}`);
      await ds.destroy();
    }
  });
}

describe('typeorm schema upgrade on sqlite', () => {
  upgradeOn('sqlite');
  migrationOn('sqlite');
});
describeWithService(SERVICE_OF.postgres, 'typeorm schema upgrade', () => {
  upgradeOn('postgres');
  migrationOn('postgres');
});
describeWithService(SERVICE_OF.mariadb, 'typeorm schema upgrade', () => upgradeOn('mariadb'));
