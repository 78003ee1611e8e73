import { DataSource } from 'typeorm';
import { ensureOutboxSchema, TypeOrmOutboxStore } from '../../lib/stores/typeorm/internal';
import { createDialect } from '../../lib/stores/typeorm/dialects';
import { wakeupListenerLock } from '../../lib/stores/typeorm/dialects/postgres/wakeups';
import { describeWithService } from '../support/services';
import { openDataSource, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';
import { wakeupSuite } from './wakeups.suite';

describeWithService('postgres', 'wake-ups across processes', () =>
  wakeupSuite({
    transactions: true,
    wakeupsPerConnect: 2,
    async setup() {
      const prefix = uniquePrefix('wk');
      const dataSource: DataSource = await openDataSource('postgres');
      await ensureOutboxSchema(dataSource, { tablePrefix: prefix });
      const store = new TypeOrmOutboxStore(dataSource, { tablePrefix: prefix });
      const channel = (await store.resolveWakeupChannel())!;
      return {
        store,
        producerEnv: { WAKE_STORE: 'postgres', WAKE_PREFIX: prefix },
        async killSubscription() {
          // The listening connections: those holding the channel's listener lock.
          const [classid, objid] = wakeupListenerLock(channel);
          const rows: unknown[] = await dataSource.query(
            `SELECT pg_terminate_backend(pid) FROM pg_locks
             WHERE locktype = 'advisory' AND objsubid = 2 AND classid = $1::oid AND objid = $2::oid
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
            [String(classid), String(objid)],
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
