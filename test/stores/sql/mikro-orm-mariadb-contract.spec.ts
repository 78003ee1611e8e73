import { afterAll, beforeAll } from '@jest/globals';
import { MikroORM } from '@mikro-orm/core';
import { MariaDbDriver } from '@mikro-orm/mariadb';
import { describeOutboxStoreContract } from 'nestjs-outbox/testing';
import { describeWithService } from '../../support/services';
import { uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { mikroStoreFor, openMariaOrm } from './mikro-orm-test-helpers';

/** The shared contract, unchanged, on MariaDB through MikroORM 6 (`@mikro-orm/mariadb`). */
describeWithService('mariadb', 'sql store through mikroOrmExecutor (MariaDB)', () => {
  const prefix = uniquePrefix('cmkm');
  let orm: MikroORM<MariaDbDriver>;
  let tables: Awaited<ReturnType<typeof mikroStoreFor>>;
  beforeAll(async () => {
    orm = await openMariaOrm(prefix);
    tables = await mikroStoreFor(orm, prefix);
  });
  afterAll(async () => {
    await tables?.store.close();
    await tables?.drop();
    await orm?.close(true);
  });
  describeOutboxStoreContract(
    'sql store (MikroORM, MariaDB)',
    async () => {
      await tables.empty();
      return { store: tables.store };
    },
    { leaseMs: 400 },
  );
});
