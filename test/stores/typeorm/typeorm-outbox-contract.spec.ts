import { afterAll, beforeAll } from '@jest/globals';
import { DataSource } from 'typeorm';
import { describeOutboxStoreContract } from 'nestjs-outbox/testing';
import { describeWithService } from '../../support/services';
import {
  openDataSource,
  SERVICE_OF,
  storeFor,
  TestDialect,
  uniquePrefix,
} from './typeorm-test-helpers';

/** The shared contract, unchanged, on each SQL database; one table set per file, emptied per test. */
function contractOn(dialect: TestDialect): void {
  let dataSource: DataSource;
  let tables: Awaited<ReturnType<typeof storeFor>>;
  beforeAll(async () => {
    dataSource = await openDataSource(dialect);
    tables = await storeFor(dataSource, uniquePrefix(`c${dialect.slice(0, 2)}`));
  });
  afterAll(async () => {
    await tables?.drop();
    await dataSource?.destroy();
  });
  describeOutboxStoreContract(
    `typeorm ${dialect}`,
    async () => {
      await tables.empty();
      return { store: tables.store };
    },
    { leaseMs: 400 },
  );
}

describe('typeorm store on sqlite', () => contractOn('sqlite'));
describeWithService(SERVICE_OF.postgres, 'typeorm store', () => contractOn('postgres'));
describeWithService(SERVICE_OF.mariadb, 'typeorm store', () => contractOn('mariadb'));
