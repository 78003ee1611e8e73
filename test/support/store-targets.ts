import { MemoryOutboxStore, OutboxStore } from 'nestjs-outbox';
import { RedisOutboxStore } from '../../lib/stores/redis/redis-outbox.store';
import {
  connect,
  dropPrefix,
  uniquePrefix as redisPrefix,
} from '../stores/redis/redis-test-support';
import {
  openDataSource,
  SERVICE_OF,
  storeFor,
  TestDialect,
  uniquePrefix,
} from '../stores/typeorm/typeorm-test-helpers';
import { describeWithService } from './services';

/** A store opened for one suite, and how to drop what it made. */
export interface OpenedStore {
  store: OutboxStore;
  close(): Promise<void>;
}

export interface StoreTarget {
  open(): Promise<OpenedStore>;
}

export type StoreName = 'memory' | TestDialect | 'redis';

/** A fresh store of `name`; `tag` goes into its table or key prefix (unique per suite). */
export function storeTarget(name: StoreName, tag: string): StoreTarget {
  if (name === 'memory') {
    return { open: async () => ({ store: new MemoryOutboxStore(), close: async () => undefined }) };
  }
  if (name === 'redis') {
    return {
      async open() {
        const prefix = redisPrefix(tag);
        const client = connect();
        return {
          store: new RedisOutboxStore({ client, prefix }),
          async close() {
            await dropPrefix(client, prefix);
            client.disconnect();
          },
        };
      },
    };
  }
  return {
    async open() {
      const dataSource = await openDataSource(name);
      const tables = await storeFor(dataSource, uniquePrefix(`${tag}${name.slice(0, 2)}`));
      return {
        store: tables.store,
        async close() {
          await tables.drop();
          await dataSource.destroy();
        },
      };
    },
  };
}

/**
 * `body` once per store, titled `title [store]`: memory and SQLite always, the servers when they
 * answer (under CI=true a missing server fails; see services.ts).
 */
export function describeOnStores(
  title: string,
  tag: string,
  body: (target: StoreTarget) => void,
  stores: readonly StoreName[] = ['memory', 'sqlite', 'postgres', 'mariadb', 'redis'],
): void {
  for (const name of stores) {
    const run = () => body(storeTarget(name, tag));
    if (name === 'memory' || name === 'sqlite') describe(`${title} [${name}]`, run);
    else describeWithService(name === 'redis' ? 'redis' : SERVICE_OF[name], title, run);
  }
}

/** Waits (real time) until `check` holds; false when `ms` passed first. */
export async function eventually(
  check: () => Promise<boolean> | boolean,
  ms: number,
): Promise<boolean> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return check();
}
