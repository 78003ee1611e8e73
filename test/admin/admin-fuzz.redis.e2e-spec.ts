import Redis from 'ioredis';
import { describeWithService } from '../support/services';
import { connect, dropPrefix, uniquePrefix } from '../stores/redis/redis-test-support';
import { describeAdminFuzz } from './admin-fuzz.suite';

describeWithService('redis', 'Admin API fuzz [redis store]', () => {
  let client: Redis;
  const prefix = uniquePrefix('admin-fuzz');

  beforeAll(() => {
    client = connect();
  });
  afterAll(async () => {
    await dropPrefix(client, prefix);
    client.disconnect();
  });

  describeAdminFuzz({
    store: async () => ({ type: 'redis', client, prefix }),
    advance: async () => undefined,
  });
});
