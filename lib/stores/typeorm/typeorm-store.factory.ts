import { MissingDependencyError } from '../../errors/missing-dependency.error';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { OutboxStore } from '../../interfaces/outbox-store.interface';
import { OutboxMessages } from '../../outbox.messages';
import type { StoreFactoryContext } from '../store-factory-context';
import { TypeOrmStoreOptions } from './typeorm-store.options';

/**
 * Builds the TypeORM store. `typeorm` is an optional peer, so it is required here and only here,
 * and its absence becomes an error naming the package to install.
 */
export async function createTypeOrmOutboxStore(
  options: TypeOrmStoreOptions,
  ctx: StoreFactoryContext,
): Promise<OutboxStore> {
  try {
    require.resolve('typeorm');
  } catch {
    throw new MissingDependencyError('typeorm', "The 'typeorm' outbox store");
  }
  const { TypeOrmOutboxStore, asTypeOrmDataSource } =
    require('./typeorm-outbox.store') as typeof import('./typeorm-outbox.store');
  const dataSource = asTypeOrmDataSource(resolveDataSource(options, ctx));
  if (!dataSource.isInitialized) {
    throw new OutboxOptionsError(
      'store.dataSource',
      'the DataSource is not initialized; call await dataSource.initialize() before the module starts (TypeOrmModule does this for you)',
    );
  }
  const store = new TypeOrmOutboxStore(dataSource, {
    tablePrefix: options.tablePrefix,
    schema: options.schema,
    ensureSchema: options.ensureSchema ?? process.env.NODE_ENV !== 'production',
    preparedStatements: options.preparedStatements,
    errorMaxLength: ctx.options.limits?.errorMaxLength,
    onWakeupError: (error) => ctx.logger.warn(OutboxMessages.wakeupFailed(error)),
    inboxAlongside: ctx.inboxAlongside,
  });
  await store.init();
  return store;
}

function resolveDataSource(options: TypeOrmStoreOptions, ctx: StoreFactoryContext): unknown {
  if (options.dataSource) return options.dataSource;
  if (options.dataSourceToken) {
    try {
      return ctx.moduleRef.get(options.dataSourceToken as never, { strict: false });
    } catch {
      throw new OutboxOptionsError(
        'store.dataSourceToken',
        `no provider ${String((options.dataSourceToken as { name?: string }).name ?? options.dataSourceToken)} found; ` +
          'import TypeOrmModule.forRoot(...) in the application, or pass store.dataSource',
      );
    }
  }
  throw new OutboxOptionsError(
    'store.dataSource',
    "give either dataSource or dataSourceToken for the 'typeorm' store",
  );
}
