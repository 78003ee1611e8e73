import { DataSource } from 'typeorm';
import { describeWithService } from '../support/services';
import { openDataSource, storeFor, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';
import { describeAdminConsole } from './admin-console.suite';

describeWithService('mariadb', 'Admin console API [typeorm store] [mariadb]', () => {
  let dataSource: DataSource;
  let tables: Awaited<ReturnType<typeof storeFor>>;
  let tablePrefix: string;

  beforeAll(async () => {
    dataSource = await openDataSource('mariadb');
    tablePrefix = uniquePrefix('console');
    tables = await storeFor(dataSource, tablePrefix);
  });
  afterAll(async () => {
    await tables?.drop();
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
