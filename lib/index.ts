// The package's surface: what an app configures, injects, decorates, catches and migrates with.
// Framework internals (the options' resolution and tokens, the handler registry) are imported by
// path inside this repository and are not part of it.
export { OutboxModule } from './outbox.module';
export { OutboxService } from './outbox.service';
export type { AppendOptions } from './outbox.service';
export { OutboxDispatcher, OutboxShutdownError } from './dispatcher/outbox.dispatcher';
export type { OutboxDispatcherStats } from './dispatcher/outbox-dispatcher.stats';
export { OutboxHandler } from './decorators/outbox-handler.decorator';
export { HandledEvent } from './decorators/handled-event.decorator';
export {
  OUTBOX_STORE,
  OUTBOX_DISPATCHER_INTERVAL,
  OUTBOX_CLEANUP_INTERVAL,
} from './outbox.constants';
export { DEFAULT_LIMITS } from './outbox-options';
export { MemoryOutboxStore } from './stores/memory/memory-outbox.store';
export type { MemoryOutboxStoreOptions } from './stores/memory/memory-outbox.store';
export * from './errors';
export * from './interfaces/outbox-event.interface';
export * from './interfaces/outbox-handler.interface';
export * from './interfaces/outbox-module-options.interface';
export * from './interfaces/outbox-store.interface';
export type { TypeOrmStoreOptions } from './stores/typeorm/typeorm-store.options';
export type { RedisStoreOptions } from './stores/redis/redis-store.options';
export type { SqlStoreOptions } from './stores/sql/sql-store.options';
export * from './executors';
export * from './admin';
// Stores: what users configure, migrate and import. Store classes and schema versions are
// internal (the module builds stores from `store` options), so they can change freely.
export {
  ensureOutboxSchema,
  createOutboxMigration,
  NestjsOutboxSchema1780000000000,
  NestjsOutboxSchema1781000000000,
  NestjsOutboxSchema1782000000000,
} from './stores/typeorm';
export type { OutboxTableOptions } from './stores/typeorm';
export type { RedisClientLike } from './stores/redis/redis-client';
export * from './inbox';
export * from './idempotency';
export * from './relay';
export * from './observability';
// Domain-event bridges (docs/domain-events.md); their peers load only when used.
export * from './bridges/cqrs';
export * from './bridges/event-emitter';
