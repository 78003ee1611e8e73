import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { OutboxStore } from '../../interfaces/outbox-store.interface';
import type { StoreFactoryContext } from '../store.factory';
import { RedisStoreOptions } from './redis-store.options';

/** Placeholder until the Redis store lands (issue #4). */
export async function createRedisOutboxStore(
  _options: RedisStoreOptions,
  _ctx: StoreFactoryContext,
): Promise<OutboxStore> {
  throw new OutboxOptionsError('store.type', "the 'redis' store is not implemented yet");
}
