import { DataSource } from 'typeorm';
import { describeWithService } from '../../support/services';
import { openDataSource, storeFor, uniquePrefix } from '../../stores/typeorm/typeorm-test-helpers';
import { describeDashboard } from './dashboard.suite';

let dataSource: DataSource | undefined;
let tables: Awaited<ReturnType<typeof storeFor>> | undefined;

// The same console steps as on Express, served by @nestjs/platform-fastify.
describeWithService('postgres', 'Dashboard on PostgreSQL, Fastify', () => {
  describeDashboard(
    '[typeorm store] [postgres] [fastify]',
    async () => {
      dataSource = await openDataSource('postgres');
      const tablePrefix = uniquePrefix('uify');
      tables = await storeFor(dataSource, tablePrefix);
      return { type: 'typeorm', dataSource, tablePrefix };
    },
    async () => {
      await tables?.drop();
      await dataSource?.destroy();
    },
    'fastify',
  );
});
