export { TypeOrmOutboxStore } from './typeorm-outbox.store';
export type { TypeOrmOutboxStoreOptions } from './typeorm-outbox.store';
export {
  ensureOutboxSchema,
  outboxSchemaStatus,
  createOutboxMigration,
  NestjsOutboxSchema1780000000000,
  NestjsOutboxSchema1781000000000,
  NestjsOutboxSchema1782000000000,
  OUTBOX_SCHEMA_VERSION,
} from './typeorm-outbox.schema';
export type { OutboxSchemaStatus } from './typeorm-outbox.schema';
export { DEFAULT_TABLE_PREFIX } from './typeorm-outbox.tables';
export type { OutboxTableOptions } from './typeorm-outbox.tables';
export type { TypeOrmStoreOptions } from './typeorm-store.options';
