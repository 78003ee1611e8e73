import { describeOutboxStoreContract } from 'nestjs-outbox/testing';
import { RedisOutboxStore } from '../../../lib/stores/redis';
import { describeWithService } from '../../support/services';
import { connect, dropPrefix, uniquePrefix } from './redis-test-support';

describeWithService('redis', 'RedisOutboxStore', () => {
  describeOutboxStoreContract(
    'redis',
    async () => {
      const client = connect();
      const prefix = uniquePrefix('contract');
      return {
        store: new RedisOutboxStore({ client, prefix }),
        teardown: async () => {
          await dropPrefix(client, prefix);
          await client.quit();
        },
      };
    },
    { leaseMs: 400 },
  );
});
