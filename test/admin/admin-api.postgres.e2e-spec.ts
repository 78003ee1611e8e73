import { DataSource } from 'typeorm';
import { describeWithService } from '../support/services';
import { openDataSource, storeFor, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';
import { describeAdminApi } from './admin-api.suite';

describeWithService('postgres', 'Admin API [typeorm store]', () => {
  let dataSource: DataSource;
  let tables: Awaited<ReturnType<typeof storeFor>>;
  let tablePrefix: string;

  beforeAll(async () => {
    dataSource = await openDataSource('postgres');
    tablePrefix = uniquePrefix('admin');
    tables = await storeFor(dataSource, tablePrefix);
  });
  afterAll(async () => {
    await tables?.drop();
    await dataSource?.destroy();
  });

  describeAdminApi({
    store: async () => {
      await tables.empty();
      return { type: 'typeorm', dataSource, tablePrefix };
    },
    // The store clock is PostgreSQL's now(); draining one batch already takes many milliseconds.
    advance: async () => undefined,
  });
});
