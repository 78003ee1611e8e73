/** Metadata key written by `@Inbox()`. */
export const INBOX_METADATA = 'outbox:inbox';
/** Metadata key listing the parameter indexes decorated with `@InboxManager()`. */
export const INBOX_MANAGER_PARAMS_METADATA = 'outbox:inbox-manager-params';
/** Metadata key listing the parameter indexes decorated with `@InboxTx()`. */
export const INBOX_TX_PARAMS_METADATA = 'outbox:inbox-tx-params';
/** Name of the inbox retention interval in `@nestjs/schedule`'s `SchedulerRegistry`. */
export const INBOX_CLEANUP_INTERVAL = 'nestjs-outbox:inbox-cleanup';
/** Longest accepted `messageId` and `consumer` (the key columns are 255 characters). */
export const INBOX_KEY_MAX_LENGTH = 255;
/** Header read for HTTP consumers when no other `messageId` source is given. */
export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';
/** The module-level inbox options after defaults (`ResolvedInboxOptions | null`). */
export const INBOX_RESOLVED_OPTIONS = 'outbox:inbox-resolved-options';
