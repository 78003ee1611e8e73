import { isSqlExecutor } from '../../executors/sql-executor';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { OutboxStore } from '../../interfaces/outbox-store.interface';
import { OutboxMessages } from '../../outbox.messages';
import type { StoreFactoryContext } from '../store-factory-context';
import { SqlStoreOptions } from './sql-store.options';

/** Builds the 'sql' store: the SQL store of the TypeORM one, over the given executor. */
export async function createSqlOutboxStore(
  options: SqlStoreOptions,
  ctx: StoreFactoryContext,
): Promise<OutboxStore> {
  if (!isSqlExecutor(options.executor)) {
    throw new OutboxOptionsError(
      'store.executor',
      "expected an executor such as pgExecutor(pool) (import { pgExecutor } from 'nestjs-outbox'); " +
        "for a TypeORM DataSource use { type: 'typeorm', dataSource }",
    );
  }
  const { SqlOutboxStore } =
    require('../typeorm/typeorm-outbox.store') as typeof import('../typeorm/typeorm-outbox.store');
  const store = new SqlOutboxStore(options.executor, {
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
