import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { OutboxStore } from '../../interfaces/outbox-store.interface';
import type { StoreFactoryContext } from '../store.factory';
import { TypeOrmStoreOptions } from './typeorm-store.options';

/** Placeholder until the TypeORM store lands (issue #3). */
export async function createTypeOrmOutboxStore(
  _options: TypeOrmStoreOptions,
  _ctx: StoreFactoryContext,
): Promise<OutboxStore> {
  throw new OutboxOptionsError('store.type', "the 'typeorm' store is not implemented yet");
}
