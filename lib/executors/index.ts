// Public API of the executors: the interface a client's executor implements, and the executors.
export { drizzleExecutor } from './drizzle-executor';
export { kyselyExecutor } from './kysely-executor';
export type { KyselyExecutorOptions } from './kysely-executor';
export { mikroOrmExecutor } from './mikro-orm-executor';
export { mysql2Executor } from './mysql2-executor';
export { pgExecutor } from './pg-executor';
export { pgliteExecutor } from './pglite-executor';
export { prismaExecutor } from './prisma-executor';
export type {
  CallerTransaction,
  CommitHooks,
  ListenerConnection,
  MysqlServerFlavor,
  SqlConnection,
  SqlExecutor,
  SqlExecutorDialect,
  SqlRows,
  SqlStatement,
} from './sql-executor';
