import { DataSource } from 'typeorm';
import { openDataSource, storeFor, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';
import { describeAdminApi } from './admin-api.suite';

describe('Admin API [typeorm store] [sqlite]', () => {
  let dataSource: DataSource;
  let tables: Awaited<ReturnType<typeof storeFor>>;
  let tablePrefix: string;

  beforeAll(async () => {
    dataSource = await openDataSource('sqlite');
    tablePrefix = uniquePrefix('admin');
    tables = await storeFor(dataSource, tablePrefix);
  });
  afterAll(async () => {
    await dataSource?.destroy();
  });

  describeAdminApi({
    store: async () => {
      await tables.empty();
      return { type: 'typeorm', dataSource, tablePrefix };
    },
    // The store clock is SQLite's, in milliseconds; draining one batch already takes several.
    advance: async () => undefined,
  });
});
