import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OptionKeys, positiveInt, refuseUnknownKeys } from '../option-fields';
import type { OutboxStoreOptions } from '../interfaces/outbox-module-options.interface';
import { IDENTIFIER } from './dialects';
import {
  InboxIsolationLevel,
  OutboxInboxOptions,
  ResolvedInboxOptions,
} from './inbox-options.interface';

export const DEFAULT_LOCK_TIMEOUT_MS = 5_000;
/** PostgreSQL's `lock_timeout` and MySQL's wait take at most a signed 32-bit count of ms. */
export const MAX_LOCK_TIMEOUT_MS = 2_147_483_647;
export const DEFAULT_INBOX_RETENTION_MS = 7 * 86_400_000;

const ISOLATION_LEVELS: InboxIsolationLevel[] = [
  'READ UNCOMMITTED',
  'READ COMMITTED',
  'REPEATABLE READ',
  'SERIALIZABLE',
];

const INBOX_KEYS = {
  dataSource: true,
  dataSourceToken: true,
  retentionMs: true,
  cleanupIntervalMs: true,
  cleanupBatchSize: true,
  isolationLevel: true,
  lockTimeoutMs: true,
  tablePrefix: true,
  schema: true,
  ensureSchema: true,
} satisfies OptionKeys<OutboxInboxOptions>;

export function isIsolationLevel(value: unknown): value is InboxIsolationLevel {
  return ISOLATION_LEVELS.includes(value as InboxIsolationLevel);
}

/**
 * Defaults and validation of `options.inbox`. Without it, the inbox follows the TypeORM store
 * (same DataSource, same table prefix); with another store and no `inbox` option, `@Inbox()`
 * needs a per-decorator `dataSource`. Returns `null` when there is no module-level inbox.
 */
export function resolveInboxOptions(
  value: unknown,
  store: OutboxStoreOptions,
): ResolvedInboxOptions | null {
  if (
    value !== undefined &&
    (typeof value !== 'object' || value === null || Array.isArray(value))
  ) {
    throw new OutboxOptionsError('inbox', `expected an object, got ${JSON.stringify(value)}`);
  }
  const o = (value ?? {}) as Record<string, unknown>;
  refuseUnknownKeys('inbox', o, INBOX_KEYS);
  const fromStore = store.type === 'typeorm' ? store : undefined;
  if (value === undefined && !fromStore) return null;

  if (o.dataSource !== undefined && o.dataSourceToken !== undefined) {
    throw new OutboxOptionsError(
      'inbox.dataSource',
      'give dataSource or dataSourceToken, not both',
    );
  }
  if (o.dataSource !== undefined && (typeof o.dataSource !== 'object' || o.dataSource === null)) {
    throw new OutboxOptionsError('inbox.dataSource', 'expected a TypeORM DataSource instance');
  }
  const explicit = o.dataSource !== undefined || o.dataSourceToken !== undefined;
  if (!explicit && !fromStore) {
    throw new OutboxOptionsError(
      'inbox.dataSource',
      "the inbox needs a TypeORM DataSource: set inbox.dataSource or inbox.dataSourceToken (only the 'typeorm' store provides one by default)",
    );
  }
  if (o.isolationLevel !== undefined && !isIsolationLevel(o.isolationLevel)) {
    throw new OutboxOptionsError(
      'inbox.isolationLevel',
      `expected one of ${ISOLATION_LEVELS.join(', ')}, got ${JSON.stringify(o.isolationLevel)}`,
    );
  }
  const tablePrefix = o.tablePrefix ?? fromStore?.tablePrefix ?? 'outbox_';
  if (typeof tablePrefix !== 'string' || !(tablePrefix === '' || IDENTIFIER.test(tablePrefix))) {
    throw new OutboxOptionsError(
      'inbox.tablePrefix',
      'expected up to 48 letters, digits or underscores, not starting with a digit',
    );
  }
  const schema = o.schema ?? (explicit ? undefined : fromStore?.schema);
  if (schema !== undefined && (typeof schema !== 'string' || !IDENTIFIER.test(schema))) {
    throw new OutboxOptionsError('inbox.schema', 'expected a plain identifier');
  }
  if (o.ensureSchema !== undefined && typeof o.ensureSchema !== 'boolean') {
    throw new OutboxOptionsError('inbox.ensureSchema', 'expected a boolean');
  }
  return {
    explicit: value !== undefined,
    dataSource: explicit ? o.dataSource : fromStore?.dataSource,
    dataSourceToken: (explicit ? o.dataSourceToken : fromStore?.dataSourceToken) as
      ResolvedInboxOptions['dataSourceToken'] | undefined,
    retentionMs: positiveInt('inbox.retentionMs', o.retentionMs, DEFAULT_INBOX_RETENTION_MS, 1),
    cleanupIntervalMs: positiveInt('inbox.cleanupIntervalMs', o.cleanupIntervalMs, 60_000, 0),
    cleanupBatchSize: positiveInt('inbox.cleanupBatchSize', o.cleanupBatchSize, 1_000, 1),
    isolationLevel: o.isolationLevel as InboxIsolationLevel | undefined,
    lockTimeoutMs: positiveInt(
      'inbox.lockTimeoutMs',
      o.lockTimeoutMs,
      DEFAULT_LOCK_TIMEOUT_MS,
      1,
      MAX_LOCK_TIMEOUT_MS,
    ),
    tablePrefix,
    schema: schema as string | undefined,
    ensureSchema:
      (o.ensureSchema as boolean | undefined) ??
      (explicit ? undefined : fromStore?.ensureSchema) ??
      process.env.NODE_ENV !== 'production',
  };
}
