import { describeOutboxStoreContract } from 'nestjs-outbox/testing';
import { RedisClientLike, RedisOutboxStore } from '../../../lib/stores/redis';
import { SERVICES, serviceUp } from '../../support/services';
import { dropPrefix, connect, uniquePrefix } from './redis-test-support';

type ClientCtor = new (options: Record<string, unknown>) => RedisClientLike & { version?: string };

/**
 * ioredis 6 next to the installed 5: an npm alias (`"ioredis6": "npm:ioredis@^6"`) or a path in
 * IOREDIS6_PATH. Without either this suite is skipped.
 */
function loadIoredis6(): { Redis: ClientCtor; version: string } | null {
  const name = process.env.IOREDIS6_PATH ?? 'ioredis6';
  try {
    const mod = require(name) as { Redis?: ClientCtor; default?: ClientCtor };
    const version = (require(`${name}/package.json`) as { version: string }).version;
    const Redis = mod.Redis ?? mod.default ?? (mod as unknown as ClientCtor);
    return version.startsWith('6.') ? { Redis, version } : null;
  } catch {
    return null;
  }
}

const ioredis6 = loadIoredis6();
const run = ioredis6 && serviceUp('redis') ? describe : describe.skip;

run(`RedisOutboxStore on ioredis ${ioredis6?.version ?? '6 (not installed)'} [redis]`, () => {
  describeOutboxStoreContract(
    'redis (ioredis 6)',
    async () => {
      const client = new ioredis6!.Redis({ host: SERVICES.redis.host, port: SERVICES.redis.port });
      const prefix = uniquePrefix('io6');
      return {
        store: new RedisOutboxStore({ client, prefix }),
        teardown: async () => {
          const admin = connect();
          await dropPrefix(admin, prefix);
          await Promise.all([admin.quit(), client.quit()]);
        },
      };
    },
    { leaseMs: 400 },
  );
});
