import { DataSource } from 'typeorm';
import { describeWithService } from '../support/services';
import { openDataSource, storeFor, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';
import { describeAdminApi } from './admin-api.suite';

// The whole admin suite again, on @nestjs/platform-fastify instead of Express.
describe('Admin API [memory store] [fastify]', () => {
  let now = Date.parse('2026-03-01T12:00:00Z');
  describeAdminApi({
    platform: 'fastify',
    store: async () => ({ type: 'memory', clock: () => new Date(now) }),
    advance: async () => {
      now += 60_000;
    },
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

  describeAdminApi({
    platform: 'fastify',
    store: async () => {
      await tables.empty();
      return { type: 'typeorm', dataSource, tablePrefix };
    },
    advance: async () => undefined,
  });
});
