import { DataSource } from 'typeorm';
import { describeWithService } from '../support/services';
import { openDataSource, storeFor, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';
import { describeAdminApi } from './admin-api.suite';
import { describeAdminConsole } from './admin-console.suite';

// The whole admin suite again, on @nestjs/platform-fastify instead of Express.
describe('Admin API [memory store] [fastify]', () => {
  let now = Date.parse('2026-03-01T12:00:00Z');
  const harness = {
    platform: 'fastify' as const,
    store: async () => ({ type: 'memory' as const, clock: () => new Date(now) }),
    advance: async () => {
      now += 60_000;
    },
  };
  describeAdminApi(harness);
  // The console routes read the store clock against real time (throughput, scheduled).
  describeAdminConsole({
    platform: 'fastify',
    store: async () => ({ type: 'memory' }),
    advance: async () => undefined,
  });
});

describeWithService('postgres', 'Admin API [typeorm store] [postgres] [fastify]', () => {
  let dataSource: DataSource;
  let tables: Awaited<ReturnType<typeof storeFor>>;
  let tablePrefix: string;

  beforeAll(async () => {
    dataSource = await openDataSource('postgres');
    tablePrefix = uniquePrefix('admfy');
    tables = await storeFor(dataSource, tablePrefix);
  });
  afterAll(async () => {
    await tables?.drop();
    await dataSource?.destroy();
  });

  const harness = {
    platform: 'fastify' as const,
    store: async () => {
      await tables.empty();
      return { type: 'typeorm' as const, dataSource, tablePrefix };
    },
    advance: async () => undefined,
  };
  describeAdminApi(harness);
  describeAdminConsole(harness);
});
