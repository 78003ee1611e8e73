import { afterAll, beforeAll } from '@jest/globals';
import { MikroORM } from '@mikro-orm/core';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import { describeOutboxStoreContract } from 'nestjs-outbox/testing';
import { describeWithService } from '../../support/services';
import { uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { mikroStoreFor, openOrm } from './mikro-orm-test-helpers';

/** The shared contract, unchanged, on PostgreSQL through MikroORM 6 (no TypeORM). */
describeWithService('postgres', 'sql store through mikroOrmExecutor', () => {
  const prefix = uniquePrefix('cmk');
  let orm: MikroORM<PostgreSqlDriver>;
  let tables: Awaited<ReturnType<typeof mikroStoreFor>>;
  beforeAll(async () => {
    orm = await openOrm(prefix);
    tables = await mikroStoreFor(orm, prefix);
  });
  afterAll(async () => {
    await tables?.store.close();
    await tables?.drop();
    await orm?.close(true);
  });
  describeOutboxStoreContract(
    'sql store (MikroORM)',
    async () => {
      await tables.empty();
      return { store: tables.store };
    },
    { leaseMs: 400 },
  );
});
