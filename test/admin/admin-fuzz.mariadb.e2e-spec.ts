import { DataSource } from 'typeorm';
import { describeWithService } from '../support/services';
import { openDataSource, storeFor, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';
import { describeAdminFuzz } from './admin-fuzz.suite';

describeWithService('mariadb', 'Admin API fuzz [typeorm store]', () => {
  let dataSource: DataSource;
  let tables: Awaited<ReturnType<typeof storeFor>>;
  let tablePrefix: string;

  beforeAll(async () => {
    dataSource = await openDataSource('mariadb');
    tablePrefix = uniquePrefix('fuzz');
    tables = await storeFor(dataSource, tablePrefix);
  });
  afterAll(async () => {
    await tables?.drop();
    await dataSource?.destroy();
  });

  describeAdminFuzz({
    store: async () => ({ type: 'typeorm', dataSource, tablePrefix }),
    advance: async () => undefined,
  });
});
