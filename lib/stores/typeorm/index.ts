// Public API of the TypeORM store (re-exported by the package barrel): schema bootstrap and
// migrations. The store class, its options and the schema version are internal: tests and the CLI
// import them by path.
export { ensureOutboxSchema } from './schema/schema';
export {
  createOutboxMigration,
  NestjsOutboxSchema1780000000000,
  NestjsOutboxSchema1781000000000,
  NestjsOutboxSchema1782000000000,
} from './schema/migrations';
export type { OutboxTableOptions } from './schema/tables';
export type { TypeOrmStoreOptions } from './typeorm-store.options';
