import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { OutboxOptionsError } from './errors/outbox-options.error';
import { resolveInboxOptions } from './inbox/inbox-options';
import {
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

const STORE_TYPES = ['memory', 'custom', 'typeorm', 'redis'];

export function defaultWorkerId(): string {
  return `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
}

function positiveInt(field: string, value: unknown, fallback: number, min = 1): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min) {
    throw new OutboxOptionsError(
      field,
      `expected an integer ≥ ${min}, got ${JSON.stringify(value)}`,
    );
  }
  return value;
}

function fraction(field: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !(value >= 0 && value <= 1)) {
    throw new OutboxOptionsError(
      field,
      `expected a number between 0 and 1, got ${JSON.stringify(value)}`,
    );
  }
  return value;
}

function plainObject(field: string, value: unknown): Record<string, unknown> {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new OutboxOptionsError(field, `expected an object, got ${JSON.stringify(value)}`);
  }
  return value as Record<string, unknown>;
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
  const b = plainObject('dispatcher.backoff', d.backoff);
  if (d.enabled !== undefined && typeof d.enabled !== 'boolean') {
    throw new OutboxOptionsError(
      'dispatcher.enabled',
      `expected a boolean, got ${JSON.stringify(d.enabled)}`,
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
  const backoff = {
    initialMs: positiveInt('dispatcher.backoff.initialMs', b.initialMs, 1_000, 0),
    factor:
      typeof b.factor === 'number' && b.factor >= 1 ? b.factor : b.factor === undefined ? 2 : NaN,
    maxMs: positiveInt('dispatcher.backoff.maxMs', b.maxMs, 300_000, 0),
    jitter: fraction('dispatcher.backoff.jitter', b.jitter, 0.2),
  };
  if (Number.isNaN(backoff.factor)) {
    throw new OutboxOptionsError(
      'dispatcher.backoff.factor',
      `expected a number ≥ 1, got ${JSON.stringify(b.factor)}`,
    );
  }
  if (backoff.maxMs < backoff.initialMs) {
    throw new OutboxOptionsError(
      'dispatcher.backoff.maxMs',
      'must be ≥ dispatcher.backoff.initialMs',
    );
  }
  const storeErrorBackoffMs = positiveInt(
    'dispatcher.storeErrorBackoffMs',
    d.storeErrorBackoffMs,
    1_000,
  );
  const dispatcher = {
    enabled: d.enabled ?? true,
    workerId: (d.workerId as string | undefined) ?? defaultWorkerId(),
    pollInterval: positiveInt('dispatcher.pollInterval', d.pollInterval, 500, 10),
    batchSize: positiveInt('dispatcher.batchSize', d.batchSize, 50),
    concurrency: positiveInt('dispatcher.concurrency', d.concurrency, 10),
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

  return { store, dispatcher, limits, retention, inbox };
}
