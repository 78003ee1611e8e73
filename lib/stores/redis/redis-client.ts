import { createHash } from 'node:crypto';
import { MissingDependencyError } from '../../errors/missing-dependency.error';
import { REDIS_SCRIPTS, RedisScriptName } from './redis-scripts';

/**
 * The part of an ioredis client (`Redis` or `Cluster`, ioredis 5 or an API-compatible 6) the
 * library uses. Typed structurally so apps do not need ioredis types to compile.
 */
export interface RedisClientLike {
  evalsha(sha: string, numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  eval(script: string, numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  quit(): Promise<unknown>;
  disconnect(): void;
  /** ioredis' connection state; `'end'` once closed for good. */
  readonly status?: string;
}

/**
 * Closes a connection with QUIT, else (QUIT failed: the connection is closing or gone) drops it —
 * unless it has ended already, since ioredis' disconnect of an ended connection only arms its 2 s
 * timer, which keeps the process alive after the app closed.
 */
export async function quitConnection(
  client: Pick<RedisClientLike, 'quit' | 'disconnect' | 'status'>,
): Promise<void> {
  try {
    await client.quit();
  } catch {
    if (client.status !== 'end') client.disconnect();
  }
}

/** True for something that looks like an ioredis client. */
export function isRedisClientLike(value: unknown): value is RedisClientLike {
  const c = value as Partial<RedisClientLike> | null;
  return (
    !!c &&
    typeof c.evalsha === 'function' &&
    typeof c.eval === 'function' &&
    typeof c.quit === 'function'
  );
}

/** The `keyPrefix` an ioredis client adds to declared keys; dynamic keys built in Lua need it too. */
export function clientKeyPrefix(client: RedisClientLike): string {
  const options = (
    client as { options?: { keyPrefix?: string; redisOptions?: { keyPrefix?: string } } }
  ).options;
  return options?.keyPrefix ?? options?.redisOptions?.keyPrefix ?? '';
}

/** A Lua script with its SHA1, for EVALSHA. */
export interface LuaScript {
  src: string;
  sha: string;
}

export function luaScript(src: string): LuaScript {
  return { src, sha: createHash('sha1').update(src).digest('hex') };
}

const SCRIPTS = Object.fromEntries(
  Object.entries(REDIS_SCRIPTS).map(([name, src]) => [name, luaScript(src)]),
) as Record<RedisScriptName, LuaScript>;

/**
 * Runs a script by EVALSHA and falls back to EVAL when the server lost its script cache (restart,
 * failover, SCRIPT FLUSH). Not `defineCommand`: that would add methods to the application's client.
 */
export async function evalScript(
  client: RedisClientLike,
  script: LuaScript,
  keys: string[],
  args: (string | number)[],
): Promise<unknown> {
  try {
    return await client.evalsha(script.sha, keys.length, ...keys, ...args);
  } catch (error) {
    if (!(error instanceof Error) || !error.message.includes('NOSCRIPT')) throw error;
    return client.eval(script.src, keys.length, ...keys, ...args);
  }
}

/** Runs one of the outbox store's scripts. */
export function runScript(
  client: RedisClientLike,
  name: RedisScriptName,
  keys: string[],
  args: (string | number)[],
): Promise<unknown> {
  return evalScript(client, SCRIPTS[name], keys, args);
}

type RedisConstructor = new (url: string, options?: Record<string, unknown>) => RedisClientLike;

/** Loads ioredis only when the library must create a client itself. */
export function loadIoredis(feature: string): RedisConstructor {
  let mod: { default?: RedisConstructor; Redis?: RedisConstructor } & RedisConstructor;
  try {
    mod = require('ioredis');
  } catch (error) {
    if ((error as { code?: string }).code === 'MODULE_NOT_FOUND')
      throw new MissingDependencyError('ioredis', feature);
    throw error;
  }
  return mod.Redis ?? mod.default ?? mod;
}
