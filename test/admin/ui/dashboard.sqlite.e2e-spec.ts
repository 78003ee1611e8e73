import { DataSource } from 'typeorm';
import { openDataSource, storeFor, uniquePrefix } from '../../stores/typeorm/typeorm-test-helpers';
import { describeDashboard } from './dashboard.suite';

let dataSource: DataSource | undefined;

describeDashboard(
  '[typeorm store] [sqlite]',
  async () => {
    dataSource = await openDataSource('sqlite');
    const tablePrefix = uniquePrefix('ui');
    await storeFor(dataSource, tablePrefix);
    return { type: 'typeorm', dataSource, tablePrefix };
  },
  async () => {
    await dataSource?.destroy();
  },
);
