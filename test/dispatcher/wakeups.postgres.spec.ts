import { DataSource } from 'typeorm';
import { ensureOutboxSchema, TypeOrmOutboxStore } from '../../lib/stores/typeorm/internal';
import { createDialect } from '../../lib/stores/typeorm/dialects';
import { describeWithService } from '../support/services';
import { openDataSource, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';
import { wakeupSuite } from './wakeups.suite';

describeWithService('postgres', 'wake-ups across processes', () =>
  wakeupSuite({
    transactions: true,
    async setup() {
      const prefix = uniquePrefix('wk');
      const dataSource: DataSource = await openDataSource('postgres');
      await ensureOutboxSchema(dataSource, { tablePrefix: prefix });
      const store = new TypeOrmOutboxStore(dataSource, { tablePrefix: prefix });
      const channel = store.wakeupChannel!;
      return {
        store,
        producerEnv: { WAKE_STORE: 'postgres', WAKE_PREFIX: prefix },
        async killSubscription() {
          const rows: unknown[] = await dataSource.query(
            `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query = $1`,
            [`LISTEN "${channel}"`],
          );
          return rows.length;
        },
        async teardown() {
          for (const ddl of createDialect(dataSource, { tablePrefix: prefix }).dropSchema()) {
            await dataSource.query(ddl);
          }
          await dataSource.destroy();
        },
      };
    },
  }),
);
