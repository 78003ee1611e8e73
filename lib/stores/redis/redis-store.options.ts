/** Redis as the durability boundary (ioredis). Atomic only with Redis writes, never with SQL. */
export interface RedisStoreOptions {
  type: 'redis';
  /**
   * An ioredis client (`Redis` or `Cluster`) owned by the application; the library never closes
   * it. Takes precedence over `url`.
   */
  client?: unknown;
  /** Connection URL when the library should create (and on shutdown close) its own client. */
  url?: string;
  /** ioredis options for the client created from `url` (TLS, password, retry strategy, …). */
  redisOptions?: Record<string, unknown>;
  /** Key prefix; keys use a `{prefix}` hash tag so one outbox lives in one Cluster slot. @default 'outbox' */
  prefix?: string;
}
