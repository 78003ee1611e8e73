import { DataSource } from 'typeorm';
import { openDataSource, storeFor, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';
import { describeAdminConsole } from './admin-console.suite';

describe('Admin console API [typeorm store] [sqlite]', () => {
  let dataSource: DataSource;
  let tables: Awaited<ReturnType<typeof storeFor>>;
  let tablePrefix: string;

  beforeAll(async () => {
    dataSource = await openDataSource('sqlite');
    tablePrefix = uniquePrefix('console');
    tables = await storeFor(dataSource, tablePrefix);
  });
  afterAll(async () => {
    await dataSource?.destroy();
  });

  describeAdminConsole({
    store: async () => {
      await tables.empty();
      return { type: 'typeorm', dataSource, tablePrefix };
    },
    advance: async () => undefined,
  });
});
