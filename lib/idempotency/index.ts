export type { IdempotencyClaim, IdempotencyStore } from './idempotency-store.interface';
export { MemoryIdempotencyStore } from './memory-idempotency.store';
export type { MemoryIdempotencyStoreOptions } from './memory-idempotency.store';
export { RedisIdempotencyStore } from './redis-idempotency.store';
export type { RedisIdempotencyStoreOptions } from './redis-idempotency.store';
export { runIdempotent } from './run-idempotent';
export type { IdempotentOutcome, RunIdempotentOptions } from './run-idempotent';
