// Public API of the TypeORM store (re-exported by the package barrel): schema bootstrap and
// migrations. The store class, its options and the schema version are internal: tests and the CLI
// import them by path.
export {
  ensureOutboxSchema,
  createOutboxMigration,
  NestjsOutboxSchema1780000000000,
  NestjsOutboxSchema1781000000000,
  NestjsOutboxSchema1782000000000,
} from './typeorm-outbox.schema';
export type { OutboxTableOptions } from './typeorm-outbox.tables';
export type { TypeOrmStoreOptions } from './typeorm-store.options';
