// Everything of the TypeORM store that tests, the CLI and the bench reach for but users do not:
// not re-exported by the package barrel, so it can change freely between releases.
export * from './index';
export { SqlOutboxStore, TypeOrmOutboxStore } from './typeorm-outbox.store';
export type { TypeOrmOutboxStoreOptions } from './typeorm-outbox.store';
export { outboxSchemaStatus, OUTBOX_SCHEMA_VERSION } from './schema/schema';
export type { OutboxSchemaStatus } from './schema/schema';
export { DEFAULT_TABLE_PREFIX } from './schema/tables';
