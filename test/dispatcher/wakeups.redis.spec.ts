import { RedisOutboxStore } from '../../lib/stores/redis/redis-outbox.store';
import { wakeupConnectionName } from '../../lib/stores/redis/redis-wakeups';
import { describeWithService } from '../support/services';
import { connect, dropPrefix, uniquePrefix } from '../stores/redis/redis-test-support';
import { wakeupSuite } from './wakeups.suite';

describeWithService('redis', 'wake-ups across processes', () =>
  wakeupSuite({
    transactions: false,
    async setup() {
      const prefix = uniquePrefix('wk');
      const client = connect();
      const admin = connect();
      const store = new RedisOutboxStore({ client, prefix });
      return {
        store,
        producerEnv: { WAKE_STORE: 'redis', WAKE_PREFIX: prefix },
        async killSubscription() {
          // This worker's subscriber only: its name carries the store's prefix.
          const list = String(await admin.call('CLIENT', 'LIST', 'TYPE', 'pubsub'));
          const ids = list
            .split('\n')
            .filter((line) => line.includes(` name=${wakeupConnectionName(prefix)} `))
            .map((line) => /(?:^| )id=(\d+)/.exec(line)?.[1])
            .filter((id): id is string => !!id);
          for (const id of ids) await admin.call('CLIENT', 'KILL', 'ID', id);
          return ids.length;
        },
        async teardown() {
          await dropPrefix(admin, prefix);
          admin.disconnect();
          client.disconnect();
        },
      };
    },
  }),
);
