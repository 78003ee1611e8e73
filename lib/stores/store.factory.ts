import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxStore } from '../interfaces/outbox-store.interface';
import { DeferredOutboxStore } from './deferred-outbox.store';
import { MemoryOutboxStore } from './memory/memory-outbox.store';
import type { StoreFactoryContext } from './store-factory-context';

export type { StoreFactoryContext } from './store-factory-context';

/**
 * Builds the store chosen by `options.store.type`. Stores with optional peers are required lazily
 * so an app on the memory store never loads typeorm or ioredis.
 */
export async function createOutboxStore(ctx: StoreFactoryContext): Promise<OutboxStore> {
  const store = ctx.options.store;
  switch (store.type) {
    case 'memory': {
      if (process.env.NODE_ENV === 'production' && !store.allowInProduction) {
        throw new OutboxOptionsError(
          'store.type',
          'the memory store loses every event when the process exits and refuses NODE_ENV=production; ' +
            "use a durable store ({ type: 'typeorm' }, { type: 'sql' } or { type: 'redis' }) or set store.allowInProduction: true",
        );
      }
      return new MemoryOutboxStore({ clock: store.clock });
    }
    case 'custom':
      return store.store;
    case 'typeorm':
      return new DeferredOutboxStore(() => {
        const { createTypeOrmOutboxStore } =
          require('./typeorm/typeorm-store.factory') as typeof import('./typeorm/typeorm-store.factory');
        return createTypeOrmOutboxStore(store, ctx);
      });
    case 'sql':
      return new DeferredOutboxStore(() => {
        const { createSqlOutboxStore } =
          require('./sql/sql-store.factory') as typeof import('./sql/sql-store.factory');
        return createSqlOutboxStore(store, ctx);
      });
    case 'redis':
      return new DeferredOutboxStore(() => {
        const { createRedisOutboxStore } =
          require('./redis/redis-store.factory') as typeof import('./redis/redis-store.factory');
        return createRedisOutboxStore(store, ctx);
      });
  }
}
