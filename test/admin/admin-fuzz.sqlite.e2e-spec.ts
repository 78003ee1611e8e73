import { DataSource } from 'typeorm';
import { openDataSource, storeFor, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';
import { describeAdminFuzz } from './admin-fuzz.suite';

describe('Admin API fuzz [typeorm store] [sqlite]', () => {
  let dataSource: DataSource;
  let tablePrefix: string;

  beforeAll(async () => {
    dataSource = await openDataSource('sqlite');
    tablePrefix = uniquePrefix('fuzz');
    await storeFor(dataSource, tablePrefix);
  });
  afterAll(async () => {
    await dataSource?.destroy();
  });

  describeAdminFuzz({
    store: async () => ({ type: 'typeorm', dataSource, tablePrefix }),
    advance: async () => undefined,
  });
});
