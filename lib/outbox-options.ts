import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { OutboxOptionsError } from './errors/outbox-options.error';
import { fraction, plainObject, positiveInt } from './option-fields';
import { resolveInboxOptions } from './inbox/inbox-options';
import { resolveObservabilityOptions } from './observability/observability-options';
import {
  BackoffOptions,
  OutboxLimits,
  OutboxModuleOptions,
  ResolvedOutboxOptions,
} from './interfaces/outbox-module-options.interface';

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

/**
 * Validates backoff options (module-wide or per handler) and fills what is missing, or
 * `undefined`, from `base`; `field` prefixes the option path in errors.
 */
export function resolveBackoff(
  field: string,
  raw: unknown,
  base: Required<BackoffOptions>,
): Required<BackoffOptions> {
  const b = plainObject(field, raw);
  const factor = b.factor;
  if (
    factor !== undefined &&
    (typeof factor !== 'number' || !Number.isFinite(factor) || factor < 1)
  ) {
    throw new OutboxOptionsError(
      `${field}.factor`,
      `expected a number ≥ 1, got ${JSON.stringify(factor)}`,
    );
  }
  const backoff = {
    initialMs: positiveInt(`${field}.initialMs`, b.initialMs, base.initialMs, 0),
    factor: (factor as number | undefined) ?? base.factor,
    maxMs: positiveInt(`${field}.maxMs`, b.maxMs, base.maxMs, 0),
    jitter: fraction(`${field}.jitter`, b.jitter, base.jitter),
  };
  if (backoff.maxMs < backoff.initialMs) {
    throw new OutboxOptionsError(`${field}.maxMs`, `must be ≥ ${field}.initialMs`);
  }
  return backoff;
}

/** Limits bounded by the SQL stores' column sizes. */
const LIMIT_CAPS: Partial<OutboxLimits> = { typeMaxLength: 255, keyMaxLength: 512 };

const STORE_TYPES = ['memory', 'custom', 'typeorm', 'redis'];

export function defaultWorkerId(): string {
  return `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
}

/**
 * Applies defaults and validates; both `forRoot` and `forRootAsync` resolve options here, so a
 * bad option fails bootstrap with the option path named.
 */
export function resolveOutboxOptions(options: OutboxModuleOptions): ResolvedOutboxOptions {
  const root = plainObject('options', options);
  const store = plainObject('store', root.store) as unknown as OutboxModuleOptions['store'];
  if (root.store === undefined || !STORE_TYPES.includes(String(store.type))) {
    throw new OutboxOptionsError(
      'store.type',
      `expected one of ${STORE_TYPES.map((t) => `'${t}'`).join(', ')}, got ${JSON.stringify(store.type)}`,
    );
  }
  if (store.type === 'custom' && (typeof store.store !== 'object' || store.store === null)) {
    throw new OutboxOptionsError('store.store', 'a custom store needs an OutboxStore instance');
  }

  const d = plainObject('dispatcher', root.dispatcher);
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
  for (const [name, value] of Object.entries(l)) {
    if (!(name in DEFAULT_LIMITS)) {
      throw new OutboxOptionsError(
        `limits.${name}`,
        `unknown limit; known: ${Object.keys(DEFAULT_LIMITS).join(', ')}`,
      );
    }
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

  return { store, dispatcher, limits, retention, inbox, observability };
}
