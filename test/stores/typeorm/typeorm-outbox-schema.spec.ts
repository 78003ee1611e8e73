import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { Logger } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { runCli } from '../../../lib/cli';
import { OutboxOptionsError } from '../../../lib/errors/outbox-options.error';
import {
  createOutboxMigration,
  ensureOutboxSchema,
  OUTBOX_SCHEMA_VERSION,
  outboxSchemaStatus,
  TypeOrmOutboxStore,
} from '../../../lib/stores/typeorm/internal';
import { createTypeOrmOutboxStore } from '../../../lib/stores/typeorm/typeorm-store.factory';
import { describeWithService } from '../../support/services';
import {
  dataSourceOptions,
  openDataSource,
  SERVICE_OF,
  storeFor,
  TestDialect,
  uniquePrefix,
} from './typeorm-test-helpers';

const A = { name: 'A.handle', types: ['s.event'] };
const event = () => ({
  id: randomUUID(),
  type: 's.event',
  payload: { ok: true },
  key: null,
  headers: {},
  occurredAt: new Date(),
  availableAt: null,
  handlers: ['A.handle'],
});

describe('typeorm store options', () => {
  it('refuses drivers other than postgres, mysql/mariadb and sqlite', () => {
    for (const type of ['oracle', 'mssql', 'sqljs', 'mongodb']) {
      expect(() => new TypeOrmOutboxStore({ options: { type } } as unknown as DataSource)).toThrow(
        OutboxOptionsError,
      );
    }
  });

  it('validates the table prefix and schema before they reach SQL', () => {
    const ds = { options: { type: 'postgres' } } as unknown as DataSource;
    for (const tablePrefix of ['x; DROP TABLE y', 'a"b', 'é_', '', 'a'.repeat(41), '1abc']) {
      expect(() => new TypeOrmOutboxStore(ds, { tablePrefix })).toThrow(OutboxOptionsError);
    }
    expect(() => new TypeOrmOutboxStore(ds, { schema: 'pub"lic' })).toThrow(OutboxOptionsError);
    expect(
      () => new TypeOrmOutboxStore(ds, { tablePrefix: 'app_outbox_', schema: 'messaging' }),
    ).not.toThrow();
  });

  it('resolves the DataSource from @nestjs/typeorm by token and ensures the schema', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [TypeOrmModule.forRoot({ type: 'better-sqlite3', database: ':memory:' })],
    }).compile();
    await moduleRef.init();
    try {
      const ctx = {
        moduleRef,
        logger: new Logger('test'),
        options: { limits: { errorMaxLength: 100 } },
      } as never;
      const store = await createTypeOrmOutboxStore(
        { type: 'typeorm', dataSourceToken: getDataSourceToken(), ensureSchema: true },
        ctx,
      );
      await store.append([event()]);
      expect(
        await store.claim({ workerId: 'w', handlers: [A], limit: 10, leaseMs: 1000 }),
      ).toHaveLength(1);
      await expect(createTypeOrmOutboxStore({ type: 'typeorm' }, ctx)).rejects.toBeInstanceOf(
        OutboxOptionsError,
      );
      await expect(
        createTypeOrmOutboxStore(
          {
            type: 'typeorm',
            dataSource: new DataSource({ type: 'better-sqlite3', database: ':memory:' }),
          },
          ctx,
        ),
      ).rejects.toThrow(/not initialized/);
    } finally {
      await moduleRef.close();
    }
  });
});

function schemaOn(dialect: TestDialect): void {
  it('runs as a TypeORM migration, up and down, with status following', async () => {
    const prefix = uniquePrefix(`m${dialect.slice(0, 2)}`);
    const ds = await new DataSource({
      ...dataSourceOptions(dialect),
      migrations: [createOutboxMigration({ tablePrefix: prefix }, 1780000000123)],
      migrationsTableName: `${prefix}migrations`,
    }).initialize();
    try {
      expect(await outboxSchemaStatus(ds, { tablePrefix: prefix })).toMatchObject({
        current: null,
        upToDate: false,
      });
      expect(await ds.runMigrations({ transaction: 'each' })).toHaveLength(1);
      expect(await outboxSchemaStatus(ds, { tablePrefix: prefix })).toEqual({
        current: OUTBOX_SCHEMA_VERSION,
        expected: OUTBOX_SCHEMA_VERSION,
        upToDate: true,
      });
      const store = new TypeOrmOutboxStore(ds, { tablePrefix: prefix });
      await store.append([event()]);
      expect(
        await store.claim({ workerId: 'w', handlers: [A], limit: 10, leaseMs: 1000 }),
      ).toHaveLength(1);
      await ds.undoLastMigration({ transaction: 'each' });
      expect((await outboxSchemaStatus(ds, { tablePrefix: prefix })).current).toBeNull();
    } finally {
      await ds.query(`DROP TABLE IF EXISTS ${prefix}migrations`);
      await ds.destroy();
    }
  });

  if (dialect !== 'sqlite') {
    it('ensureSchema is safe when several replicas call it at once', async () => {
      const prefix = uniquePrefix(`e${dialect.slice(0, 2)}`);
      const sources = await Promise.all(Array.from({ length: 5 }, () => openDataSource(dialect)));
      try {
        await Promise.all(sources.map((ds) => ensureOutboxSchema(ds, { tablePrefix: prefix })));
        await Promise.all(sources.map((ds) => ensureOutboxSchema(ds, { tablePrefix: prefix })));
        const versions = (await sources[0].query(
          `SELECT version FROM ${prefix}schema_version`,
        )) as unknown[];
        expect(versions).toHaveLength(1);
      } finally {
        await (await storeFor(sources[0], prefix)).drop();
        await Promise.all(sources.map((ds) => ds.destroy()));
      }
    });
  }
}

describe('typeorm schema [sqlite]', () => schemaOn('sqlite'));
describeWithService(SERVICE_OF.postgres, 'typeorm schema', () => {
  schemaOn('postgres');

  it('puts the tables in a configured PostgreSQL schema', async () => {
    const schema = `outbox_${randomBytes(4).toString('hex')}`;
    const ds = await openDataSource('postgres');
    try {
      await ensureOutboxSchema(ds, { schema });
      const store = new TypeOrmOutboxStore(ds, { schema });
      await store.append([event()]);
      const [{ n }] = await ds.query(`SELECT count(*)::int AS n FROM "${schema}".outbox_events`);
      expect(n).toBe(1);
      expect(
        await store.claim({ workerId: 'w', handlers: [A], limit: 10, leaseMs: 1000 }),
      ).toHaveLength(1);
    } finally {
      await ds.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await ds.destroy();
    }
  });
});
describeWithService(SERVICE_OF.mariadb, 'typeorm schema', () => schemaOn('mariadb'));

describe('nestjs-outbox CLI', () => {
  const capture = () => {
    const lines: string[] = [];
    return { lines, io: { out: (l: string) => lines.push(l), err: (l: string) => lines.push(l) } };
  };

  it('prints the DDL of each dialect without a connection', async () => {
    for (const dialect of ['postgres', 'mysql', 'sqlite']) {
      const { lines, io } = capture();
      expect(
        await runCli(['schema', 'sql', '--dialect', dialect, '--prefix', 'app_outbox_'], io),
      ).toBe(0);
      expect(lines.join('\n')).toMatch(/CREATE TABLE IF NOT EXISTS .app_outbox_deliveries./);
    }
    const { io } = capture();
    expect(await runCli(['schema', 'sql', '--dialect', 'oracle'], io)).toBe(2);
    expect(
      await runCli(['schema', 'sql', '--dialect', 'sqlite', '--prefix', 'bad;prefix'], io),
    ).toBe(2);
  });

  it('reports status non-zero until migrate has run (sqlite file)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'outbox-cli-'));
    const url = `sqlite:${join(dir, 'app.db')}`;
    try {
      const { lines, io } = capture();
      expect(await runCli(['schema', 'status', '--url', url], io)).toBe(1);
      expect(lines.pop()).toMatch(/not found.*schema migrate/);
      expect(await runCli(['schema', 'migrate', '--url', url], io)).toBe(0);
      expect(await runCli(['schema', 'status', '--url', url], io)).toBe(0);
      expect(await runCli(['schema', 'status', '--url', url, '--prefix', 'other_'], io)).toBe(1);
      expect(await runCli(['schema', 'status'], io)).toBe(2);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
