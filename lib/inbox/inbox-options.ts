import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OptionKeys, positiveInt, refuseUnknownKeys } from '../option-fields';
import type { OutboxStoreOptions } from '../interfaces/outbox-module-options.interface';
import { isSqlExecutor, SqlExecutor } from '../executors/sql-executor';
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
  executor: true,
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
 * Refuses an executor beside a DataSource (`path` is `inbox`, `@Inbox` or `''` for InboxModule's options): the inbox runs on one
 * client, and which one the app meant cannot be guessed.
 */
export function refuseExecutorWith(
  o: { dataSource?: unknown; dataSourceToken?: unknown },
  path: string,
  error: (field: string, reason: string) => Error = (field, reason) =>
    new OutboxOptionsError(field, reason),
): void {
  const other =
    o.dataSource !== undefined
      ? 'dataSource'
      : o.dataSourceToken !== undefined
        ? 'dataSourceToken'
        : null;
  if (!other) return;
  throw error(
    path === '' ? 'executor' : `${path}.executor`,
    `give executor or ${other}, not both: the inbox runs on one client (executor for node-postgres, Drizzle or Kysely; ${other} for TypeORM)`,
  );
}

/**
 * Defaults and validation of `options.inbox` (`path` `inbox`), or of `InboxModule.forRoot`'s options
 * (`path` `''`: errors name the fields as written there; InboxModule names itself in the message). Without it, the inbox follows the TypeORM or SQL
 * store (same DataSource or executor, same table prefix); with another store and no `inbox`
 * option, `@Inbox()` needs a per-decorator `dataSource` or `executor`. Returns `null` when there is no module-level inbox.
 */
export function resolveInboxOptions(
  value: unknown,
  store: OutboxStoreOptions,
  path = 'inbox',
): ResolvedInboxOptions | null {
  const at = (key: string) => (path === '' ? key : `${path}.${key}`);
  if (
    value !== undefined &&
    (typeof value !== 'object' || value === null || Array.isArray(value))
  ) {
    throw new OutboxOptionsError(
      path || 'options',
      `expected an object, got ${JSON.stringify(value)}`,
    );
  }
  const o = (value ?? {}) as Record<string, unknown>;
  refuseUnknownKeys(path, o, INBOX_KEYS);
  const fromStore = store.type === 'typeorm' || store.type === 'sql' ? store : undefined;
  if (value === undefined && !fromStore) return null;

  if (o.dataSource !== undefined && o.dataSourceToken !== undefined) {
    throw new OutboxOptionsError(at('dataSource'), 'give dataSource or dataSourceToken, not both');
  }
  if (o.dataSource !== undefined && (typeof o.dataSource !== 'object' || o.dataSource === null)) {
    throw new OutboxOptionsError(at('dataSource'), 'expected a TypeORM DataSource instance');
  }
  if (o.executor !== undefined) {
    refuseExecutorWith(o, path);
    if (!isSqlExecutor(o.executor)) {
      throw new OutboxOptionsError(
        at('executor'),
        'expected an executor such as pgExecutor(pool), drizzleExecutor(db) or kyselyExecutor(db)',
      );
    }
  }
  const explicit =
    o.dataSource !== undefined || o.dataSourceToken !== undefined || o.executor !== undefined;
  if (!explicit && !fromStore) {
    throw new OutboxOptionsError(
      at('dataSource'),
      `the inbox needs a TypeORM DataSource or an executor: set ${at('dataSource')}, ${at('dataSourceToken')} or ${at('executor')} (only the 'typeorm' and 'sql' stores provide one by default)`,
    );
  }
  if (o.isolationLevel !== undefined && !isIsolationLevel(o.isolationLevel)) {
    throw new OutboxOptionsError(
      at('isolationLevel'),
      `expected one of ${ISOLATION_LEVELS.join(', ')}, got ${JSON.stringify(o.isolationLevel)}`,
    );
  }
  const typeOrmStore = store.type === 'typeorm' ? store : undefined;
  const sqlStore = store.type === 'sql' ? store : undefined;
  const tablePrefix = o.tablePrefix ?? fromStore?.tablePrefix ?? 'outbox_';
  if (typeof tablePrefix !== 'string' || !(tablePrefix === '' || IDENTIFIER.test(tablePrefix))) {
    throw new OutboxOptionsError(
      at('tablePrefix'),
      'expected up to 48 letters, digits or underscores, not starting with a digit',
    );
  }
  const schema = o.schema ?? (explicit ? undefined : fromStore?.schema);
  if (schema !== undefined && (typeof schema !== 'string' || !IDENTIFIER.test(schema))) {
    throw new OutboxOptionsError(at('schema'), 'expected a plain identifier');
  }
  if (o.ensureSchema !== undefined && typeof o.ensureSchema !== 'boolean') {
    throw new OutboxOptionsError(at('ensureSchema'), 'expected a boolean');
  }
  return {
    explicit: value !== undefined,
    dataSource: explicit ? o.dataSource : typeOrmStore?.dataSource,
    dataSourceToken: (explicit ? o.dataSourceToken : typeOrmStore?.dataSourceToken) as
      ResolvedInboxOptions['dataSourceToken'] | undefined,
    executor: (explicit ? o.executor : sqlStore?.executor) as SqlExecutor | undefined,
    retentionMs: positiveInt(at('retentionMs'), o.retentionMs, DEFAULT_INBOX_RETENTION_MS, 1),
    cleanupIntervalMs: positiveInt(at('cleanupIntervalMs'), o.cleanupIntervalMs, 60_000, 0),
    cleanupBatchSize: positiveInt(at('cleanupBatchSize'), o.cleanupBatchSize, 1_000, 1),
    isolationLevel: o.isolationLevel as InboxIsolationLevel | undefined,
    lockTimeoutMs: positiveInt(
      at('lockTimeoutMs'),
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
