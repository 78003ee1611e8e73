/** Redis as the durability boundary (ioredis). */
export interface RedisStoreOptions {
  type: 'redis';
  /** An ioredis client (or Cluster) owned by the application; not closed by the library. */
  client?: unknown;
  /** Connection URL when the library should create (and later close) its own client. */
  url?: string;
  /** Key prefix; keys use a `{prefix}` hash tag so one outbox lives in one Cluster slot. @default 'outbox' */
  prefix?: string;
}
