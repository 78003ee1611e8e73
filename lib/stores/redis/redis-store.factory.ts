import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { OutboxStore } from '../../interfaces/outbox-store.interface';
import { OutboxMessages } from '../../outbox.messages';
import type { StoreFactoryContext } from '../store-factory-context';
import { isRedisClientLike, loadIoredis } from './redis-client';
import { RedisOutboxStore } from './redis-outbox.store';
import { RedisStoreOptions } from './redis-store.options';

/**
 * Builds the Redis store from module options: the application's client when given (never closed
 * by the library), otherwise a client created from `url` that `close()` shuts down.
 */
export async function createRedisOutboxStore(
  options: RedisStoreOptions,
  ctx: StoreFactoryContext,
): Promise<OutboxStore> {
  const onWakeupError = (error: unknown) => ctx.logger.warn(OutboxMessages.wakeupFailed(error));
  if (options.client !== undefined) {
    if (!isRedisClientLike(options.client)) {
      throw new OutboxOptionsError(
        'store.client',
        'must be an ioredis client (new Redis(...) or new Cluster(...)); pass `url` to let the library create one',
      );
    }
    return new RedisOutboxStore({ client: options.client, prefix: options.prefix, onWakeupError });
  }
  if (!options.url) {
    throw new OutboxOptionsError(
      'store',
      "the 'redis' store needs `client` (an ioredis client) or `url`",
    );
  }
  const Redis = loadIoredis("The 'redis' outbox store");
  const client = new Redis(options.url, { ...options.redisOptions });
  try {
    return new RedisOutboxStore({
      client,
      prefix: options.prefix,
      ownsClient: true,
      onWakeupError,
    });
  } catch (error) {
    // Refused options (a prefix with braces): the client made here would reconnect forever.
    client.disconnect();
    throw error;
  }
}
