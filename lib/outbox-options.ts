import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { OutboxOptionsError } from './errors/outbox-options.error';
import { describeValue, isSqlExecutor } from './executors/sql-executor';
import {
  fraction,
  OptionKeys,
  plainObject,
  positiveInt,
  refuseUnknownKeys,
  shown,
} from './option-fields';
import { resolveInboxOptions } from './inbox/inbox-options';
import { resolveObservabilityOptions } from './observability/observability-options';
import {
  BackoffOptions,
  CustomStoreOptions,
  MemoryStoreOptions,
  OutboxDispatcherOptions,
  OutboxErrorStackOptions,
  OutboxLimits,
  OutboxModuleOptions,
  OutboxRetentionOptions,
  ResolvedOutboxOptions,
} from './interfaces/outbox-module-options.interface';
import type { TypeOrmStoreOptions } from './stores/typeorm/typeorm-store.options';
import type { RedisStoreOptions } from './stores/redis/redis-store.options';
import type { SqlStoreOptions } from './stores/sql/sql-store.options';

export const DEFAULT_LIMITS: OutboxLimits = {
  typeMaxLength: 255,
  keyMaxLength: 512,
  payloadMaxBytes: 1024 * 1024,
  headersMaxCount: 64,
  headerNameMaxLength: 128,
  headerValueMaxLength: 1024,
  errorMaxLength: 4096,
  appendMaxEvents: 1000,
};

export const DEFAULT_BACKOFF: Required<BackoffOptions> = {
  initialMs: 1_000,
  factor: 2,
  maxMs: 300_000,
  jitter: 0.2,
};

const ROOT_KEYS = {
  store: true,
  dispatcher: true,
  limits: true,
  retention: true,
  inbox: true,
  logs: true,
  metrics: true,
  tracing: true,
  errorStacks: true,
} satisfies OptionKeys<OutboxModuleOptions>;

/** What `errorStacks: true` (and no option) keeps of a failure's stack. */
export const DEFAULT_ERROR_STACKS: Required<OutboxErrorStackOptions> = {
  lines: 10,
  maxLength: 2048,
};

const ERROR_STACK_KEYS = {
  lines: true,
  maxLength: true,
} satisfies OptionKeys<OutboxErrorStackOptions>;

/** Option keys per store type; values such as `dataSource` or `client` are user objects, never read. */
const STORE_KEYS: Record<string, Record<string, true>> = {
  memory: {
    type: true,
    allowInProduction: true,
    clock: true,
  } satisfies OptionKeys<MemoryStoreOptions>,
  custom: { type: true, store: true } satisfies OptionKeys<CustomStoreOptions>,
  typeorm: {
    type: true,
    dataSource: true,
    dataSourceToken: true,
    tablePrefix: true,
    schema: true,
    ensureSchema: true,
    preparedStatements: true,
  } satisfies OptionKeys<TypeOrmStoreOptions>,
  sql: {
    type: true,
    executor: true,
    tablePrefix: true,
    schema: true,
    ensureSchema: true,
    preparedStatements: true,
  } satisfies OptionKeys<SqlStoreOptions>,
  redis: {
    type: true,
    client: true,
    url: true,
    redisOptions: true,
    prefix: true,
  } satisfies OptionKeys<RedisStoreOptions>,
};

/** SQL databases someone may name as the store type: they go through the TypeORM store. */
const SQL_DATABASES = [
  'postgres',
  'postgresql',
  'pg',
  'mysql',
  'mariadb',
  'sqlite',
  'better-sqlite3',
];

const DISPATCHER_KEYS = {
  enabled: true,
  workerId: true,
  pollInterval: true,
  wakeups: true,
  batchSize: true,
  concurrency: true,
  leaseMs: true,
  handlerTimeoutMs: true,
  maxAttempts: true,
  backoff: true,
  shutdownTimeoutMs: true,
  storeErrorBackoffMs: true,
  storeErrorMaxBackoffMs: true,
} satisfies OptionKeys<OutboxDispatcherOptions>;

const BACKOFF_KEYS = {
  initialMs: true,
  factor: true,
  maxMs: true,
  jitter: true,
} satisfies OptionKeys<BackoffOptions>;

const RETENTION_KEYS = {
  deliveredMs: true,
  deadLetterMs: true,
  cleanupIntervalMs: true,
  batchSize: true,
} satisfies OptionKeys<OutboxRetentionOptions>;

/**
 * Validates backoff options (module-wide or per handler) and fills what is missing, or
 * `undefined`, from `base`; `field` prefixes the option path in errors.
 */
export function resolveBackoff(
  field: string,
  raw: unknown,
  base: Required<BackoffOptions>,
  where = '',
): Required<BackoffOptions> {
  // `where` follows the option's path: '@OutboxHandler backoff.factor on Orders.handle'.
  const at = (path: string) => `${path}${where}`;
  const b = plainObject(at(field), raw);
  refuseUnknownKeys(field, b, BACKOFF_KEYS, (f, reason) => new OutboxOptionsError(at(f), reason));
  const factor = b.factor;
  if (
    factor !== undefined &&
    (typeof factor !== 'number' || !Number.isFinite(factor) || factor < 1)
  ) {
    throw new OutboxOptionsError(
      at(`${field}.factor`),
      `expected a number ≥ 1, got ${shown(factor)}`,
    );
  }
  const backoff = {
    initialMs: positiveInt(at(`${field}.initialMs`), b.initialMs, base.initialMs, 0),
    factor: (factor as number | undefined) ?? base.factor,
    maxMs: positiveInt(at(`${field}.maxMs`), b.maxMs, base.maxMs, 0),
    jitter: fraction(at(`${field}.jitter`), b.jitter, base.jitter),
  };
  if (backoff.maxMs < backoff.initialMs) {
    throw new OutboxOptionsError(at(`${field}.maxMs`), `must be ≥ ${field}.initialMs`);
  }
  return backoff;
}

const LIMIT_KEYS = Object.fromEntries(
  Object.keys(DEFAULT_LIMITS).map((k) => [k, true]),
) as OptionKeys<OutboxLimits>;

/** Limits bounded by the SQL stores' column sizes. */
const LIMIT_CAPS: Partial<OutboxLimits> = { typeMaxLength: 255, keyMaxLength: 512 };

export function defaultWorkerId(): string {
  return `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
}

/**
 * Applies defaults and validates; both `forRoot` and `forRootAsync` resolve options here, so a
 * bad option fails bootstrap with the option path named.
 */
export function resolveOutboxOptions(options: OutboxModuleOptions): ResolvedOutboxOptions {
  const root = plainObject('options', options);
  refuseUnknownKeys('', root, ROOT_KEYS);
  const store = plainObject('store', root.store) as unknown as OutboxModuleOptions['store'];
  const storeType = String(store.type);
  if (SQL_DATABASES.includes(storeType.toLowerCase())) {
    throw new OutboxOptionsError(
      'store.type',
      `'${storeType}' is reached through TypeORM: use { type: 'typeorm', dataSource } with your TypeORM DataSource (or dataSourceToken), ` +
        "or through node-postgres: { type: 'sql', executor: pgExecutor(pool) }",
    );
  }
  if (root.store === undefined || !Object.hasOwn(STORE_KEYS, storeType)) {
    throw new OutboxOptionsError(
      'store.type',
      `expected one of ${Object.keys(STORE_KEYS)
        .map((t) => `'${t}'`)
        .join(', ')}, got ${JSON.stringify(store.type)}`,
    );
  }
  refuseUnknownKeys('store', store, STORE_KEYS[storeType]);
  if (store.type === 'sql' && !isSqlExecutor(store.executor)) {
    throw new OutboxOptionsError(
      'store.executor',
      `expected an executor such as pgExecutor(pool) (import { pgExecutor } from 'nestjs-outbox'), got ${describeValue(store.executor)}; ` +
        "for a TypeORM DataSource use { type: 'typeorm', dataSource }",
    );
  }
  if (store.type === 'custom' && (typeof store.store !== 'object' || store.store === null)) {
    throw new OutboxOptionsError('store.store', 'a custom store needs an OutboxStore instance');
  }

  const d = plainObject('dispatcher', root.dispatcher);
  refuseUnknownKeys('dispatcher', d, DISPATCHER_KEYS);
  if (d.enabled !== undefined && typeof d.enabled !== 'boolean') {
    throw new OutboxOptionsError(
      'dispatcher.enabled',
      `expected a boolean, got ${JSON.stringify(d.enabled)}`,
    );
  }
  if (d.wakeups !== undefined && typeof d.wakeups !== 'boolean') {
    throw new OutboxOptionsError(
      'dispatcher.wakeups',
      `expected a boolean, got ${JSON.stringify(d.wakeups)}`,
    );
  }
  if (
    d.workerId !== undefined &&
    (typeof d.workerId !== 'string' || !/^[\w.:@-]{1,128}$/.test(d.workerId))
  ) {
    throw new OutboxOptionsError(
      'dispatcher.workerId',
      'expected 1–128 characters of letters, digits and . _ : @ -',
    );
  }
  const leaseMs = positiveInt('dispatcher.leaseMs', d.leaseMs, 30_000, 100);
  const backoff = resolveBackoff('dispatcher.backoff', d.backoff, DEFAULT_BACKOFF);
  const storeErrorBackoffMs = positiveInt(
    'dispatcher.storeErrorBackoffMs',
    d.storeErrorBackoffMs,
    1_000,
  );
  const dispatcher = {
    enabled: d.enabled ?? true,
    workerId: (d.workerId as string | undefined) ?? defaultWorkerId(),
    pollInterval: positiveInt('dispatcher.pollInterval', d.pollInterval, 500, 10),
    wakeups: d.wakeups ?? true,
    batchSize: positiveInt('dispatcher.batchSize', d.batchSize, 100),
    concurrency: positiveInt('dispatcher.concurrency', d.concurrency, 50),
    leaseMs,
    handlerTimeoutMs: positiveInt('dispatcher.handlerTimeoutMs', d.handlerTimeoutMs, 60_000),
    maxAttempts: positiveInt('dispatcher.maxAttempts', d.maxAttempts, 10),
    backoff,
    shutdownTimeoutMs: positiveInt('dispatcher.shutdownTimeoutMs', d.shutdownTimeoutMs, 10_000, 0),
    storeErrorBackoffMs,
    storeErrorMaxBackoffMs: positiveInt(
      'dispatcher.storeErrorMaxBackoffMs',
      d.storeErrorMaxBackoffMs,
      Math.max(30_000, storeErrorBackoffMs),
      storeErrorBackoffMs,
    ),
  };

  const l = plainObject('limits', root.limits);
  const limits = { ...DEFAULT_LIMITS };
  refuseUnknownKeys('limits', l, LIMIT_KEYS);
  for (const [name, value] of Object.entries(l)) {
    limits[name as keyof OutboxLimits] = positiveInt(`limits.${name}`, value, 0);
    const cap = LIMIT_CAPS[name as keyof OutboxLimits];
    if (cap !== undefined && limits[name as keyof OutboxLimits] > cap) {
      throw new OutboxOptionsError(
        `limits.${name}`,
        `can be lowered but not raised above ${cap} (the size of the stores' columns)`,
      );
    }
  }

  const r = plainObject('retention', root.retention);
  refuseUnknownKeys('retention', r, RETENTION_KEYS);
  if (r.deadLetterMs !== undefined && r.deadLetterMs !== null) {
    positiveInt('retention.deadLetterMs', r.deadLetterMs, 0);
  }
  const retention = {
    deliveredMs: positiveInt('retention.deliveredMs', r.deliveredMs, 86_400_000, 0),
    deadLetterMs:
      r.deadLetterMs === undefined ? 30 * 86_400_000 : (r.deadLetterMs as number | null),
    cleanupIntervalMs: positiveInt('retention.cleanupIntervalMs', r.cleanupIntervalMs, 60_000, 0),
    batchSize: positiveInt('retention.batchSize', r.batchSize, 1_000),
  };

  const inbox = resolveInboxOptions(root.inbox, store);

  const observability = resolveObservabilityOptions(root);

  const errorStacks = resolveErrorStacks(root.errorStacks);

  return { store, dispatcher, limits, retention, inbox, observability, errorStacks };
}

/** `errorStacks`: `false` off, `true`/absent the defaults, an object overriding them. */
function resolveErrorStacks(value: unknown): Required<OutboxErrorStackOptions> | null {
  if (value === false) return null;
  if (value === undefined || value === true) return { ...DEFAULT_ERROR_STACKS };
  const o = plainObject('errorStacks', value);
  refuseUnknownKeys('errorStacks', o, ERROR_STACK_KEYS);
  return {
    lines: positiveInt('errorStacks.lines', o.lines, DEFAULT_ERROR_STACKS.lines, 1, 200),
    // Bounded: each delivery keeps OUTBOX_ERROR_HISTORY entries, each with its stack.
    maxLength: positiveInt(
      'errorStacks.maxLength',
      o.maxLength,
      DEFAULT_ERROR_STACKS.maxLength,
      1,
      16_384,
    ),
  };
}
