import Redis from 'ioredis';
import { describeWithService } from '../support/services';
import { connect, dropPrefix, uniquePrefix } from '../stores/redis/redis-test-support';
import { describeAdminConsole } from './admin-console.suite';

describeWithService('redis', 'Admin console API [redis store]', () => {
  let client: Redis;
  const prefixes: string[] = [];

  beforeAll(() => {
    client = connect();
  });
  afterAll(async () => {
    for (const prefix of prefixes) await dropPrefix(client, prefix);
    client.disconnect();
  });

  describeAdminConsole({
    // A fresh prefix per app: an empty store each time.
    store: async () => {
      const prefix = uniquePrefix('console');
      prefixes.push(prefix);
      return { type: 'redis', client, prefix };
    },
    advance: async () => undefined,
  });
});
