import { randomUUID } from 'node:crypto';
import { evalScript, luaScript, RedisClientLike } from '../stores/redis/redis-client';
import { IdempotencyClaim, IdempotencyStore } from './idempotency-store.interface';

export interface RedisIdempotencyStoreOptions {
  /** ioredis client (or Cluster) owned by the application; never closed by the store. */
  client: RedisClientLike;
  /** Key prefix. @default 'outbox:idem' */
  prefix?: string;
}

// A key holds 'd' once done, or 'p:<token>' while a claim is in progress; both carry a PX TTL.
const CLAIM = luaScript(`
if redis.call('SET', KEYS[1], 'p:' .. ARGV[1], 'NX', 'PX', ARGV[2]) then return 'acquired' end
if redis.call('GET', KEYS[1]) == 'd' then return 'done' end
return 'in-progress'
`);
const MARK_DONE = luaScript(`
redis.call('SET', KEYS[1], 'd', 'PX', ARGV[1])
return 1
`);
const RELEASE = luaScript(`
local v = redis.call('GET', KEYS[1])
if v and v ~= 'd' and (ARGV[1] == '' or v == 'p:' .. ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`);
const IS_DONE = luaScript(`
if redis.call('GET', KEYS[1]) == 'd' then return 1 end
return 0
`);

/**
 * Idempotency keys in Redis: `SET NX PX` while processing, a done mark with a TTL afterwards.
 * Duplicate suppression, not an exactly-once boundary (see `IdempotencyStore`).
 */
export class RedisIdempotencyStore implements IdempotencyStore {
  private readonly client: RedisClientLike;
  private readonly prefix: string;

  constructor(options: RedisIdempotencyStoreOptions) {
    this.client = options.client;
    this.prefix = options.prefix ?? 'outbox:idem';
  }

  /** The scope's length keeps `a:b` + `c` and `a` + `b:c` apart. */
  private key(scope: string, key: string): string {
    return `${this.prefix}:${scope.length}:${scope}:${key}`;
  }

  async claim(scope: string, key: string, processingTtlMs: number): Promise<IdempotencyClaim> {
    const token = randomUUID();
    const status = await evalScript(
      this.client,
      CLAIM,
      [this.key(scope, key)],
      [token, ttl(processingTtlMs)],
    );
    if (status === 'acquired') return { status, token };
    return status === 'done' ? { status: 'done' } : { status: 'in-progress' };
  }

  async markDone(scope: string, key: string, doneTtlMs: number): Promise<void> {
    await evalScript(this.client, MARK_DONE, [this.key(scope, key)], [ttl(doneTtlMs)]);
  }

  async release(scope: string, key: string, token?: string): Promise<boolean> {
    return (
      Number(await evalScript(this.client, RELEASE, [this.key(scope, key)], [token ?? ''])) === 1
    );
  }

  async isDone(scope: string, key: string): Promise<boolean> {
    return Number(await evalScript(this.client, IS_DONE, [this.key(scope, key)], [])) === 1;
  }
}

function ttl(ms: number): number {
  return Math.max(1, Math.ceil(ms));
}
