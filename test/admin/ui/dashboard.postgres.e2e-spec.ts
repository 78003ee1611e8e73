import { DataSource } from 'typeorm';
import { describeWithService } from '../../support/services';
import { openDataSource, storeFor, uniquePrefix } from '../../stores/typeorm/typeorm-test-helpers';
import { describeDashboard } from './dashboard.suite';

let dataSource: DataSource | undefined;
let tables: Awaited<ReturnType<typeof storeFor>> | undefined;

describeWithService('postgres', 'Dashboard on PostgreSQL', () => {
  describeDashboard(
    '[typeorm store] [postgres]',
    async () => {
      dataSource = await openDataSource('postgres');
      const tablePrefix = uniquePrefix('ui');
      tables = await storeFor(dataSource, tablePrefix);
      return { type: 'typeorm', dataSource, tablePrefix };
    },
    async () => {
      await tables?.drop();
      await dataSource?.destroy();
    },
  );
});
