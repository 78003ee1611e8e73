import { DataSource } from 'typeorm';
import { describeWithService } from '../support/services';
import { openDataSource, storeFor, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';
import { describeAdminConsole } from './admin-console.suite';

describe('Admin console API on Fastify [memory store]', () => {
  describeAdminConsole(
    { store: async () => ({ type: 'memory' }), advance: async () => undefined },
    'fastify',
  );
});

describeWithService('postgres', 'Admin console API on Fastify [typeorm store] [postgres]', () => {
  let dataSource: DataSource;
  let tables: Awaited<ReturnType<typeof storeFor>>;
  let tablePrefix: string;

  beforeAll(async () => {
    dataSource = await openDataSource('postgres');
    tablePrefix = uniquePrefix('consolefy');
    tables = await storeFor(dataSource, tablePrefix);
  });
  afterAll(async () => {
    await tables?.drop();
    await dataSource?.destroy();
  });

  describeAdminConsole(
    {
      store: async () => {
        await tables.empty();
        return { type: 'typeorm', dataSource, tablePrefix };
      },
      advance: async () => undefined,
    },
    'fastify',
  );
});
