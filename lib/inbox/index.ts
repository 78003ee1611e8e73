export { Inbox } from './inbox.decorator';
export { InboxManager, InboxTx } from './inbox-manager.decorator';
export { InboxContext } from './inbox.context';
export type { InboxScope } from './inbox.context';
export { InboxService } from './inbox.service';
export { InboxModule } from './inbox.module';
export { INBOX_MODULE_OPTIONS } from './inbox.module-definition';
export type { InboxModuleOptions } from './inbox.module-definition';
export { ensureInboxSchema } from './inbox.store';
export type { InboxCleanupResult, InboxRunResult, InboxTableOptions } from './inbox.store';
export { createInboxFingerprintMigration, createInboxMigration } from './inbox.migration';
export { INBOX_CLEANUP_INTERVAL } from './inbox.constants';
export type {
  InboxDataSourceToken,
  InboxIsolationLevel,
  InboxMessageIdExtractor,
  InboxMessageIdSource,
  InboxOptions,
  InboxStats,
  OutboxInboxOptions,
} from './inbox-options.interface';
