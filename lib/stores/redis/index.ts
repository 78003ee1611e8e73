export { RedisOutboxStore } from './redis-outbox.store';
export type { RedisOutboxStoreOptions } from './redis-outbox.store';
export type { RedisClientLike } from './redis-client';
export type { RedisStoreOptions } from './redis-store.options';
export { createRedisOutboxStore } from './redis-store.factory';
