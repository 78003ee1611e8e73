import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { SERVICES } from '../../support/services';

/** A fresh connection to the test Redis. */
export function connect(): Redis {
  return new Redis({
    host: SERVICES.redis.host,
    port: SERVICES.redis.port,
    maxRetriesPerRequest: null,
  });
}

/** A prefix no other test uses. */
export function uniquePrefix(label: string): string {
  return `test-${label}-${randomUUID().slice(0, 8)}`;
}

/** Every key of one outbox (they share the `{prefix}` hash tag). */
export async function keysOf(client: Redis, prefix: string): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await client.scan(cursor, 'MATCH', `{${prefix}}:*`, 'COUNT', 1000);
    keys.push(...batch);
    cursor = next;
  } while (cursor !== '0');
  return keys;
}

export async function dropPrefix(client: Redis, prefix: string): Promise<void> {
  const keys = await keysOf(client, prefix);
  for (let i = 0; i < keys.length; i += 500) await client.del(...keys.slice(i, i + 500));
}
