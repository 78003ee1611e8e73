import {
  OutboxAdminLimits,
  OutboxAdminModuleOptions,
  ResolvedOutboxAdminOptions,
} from './outbox-admin-options.interface';
import { OUTBOX_ADMIN_PAGE_SIZE_CEILING } from './outbox-admin.constants';
import { OutboxAdminOptionsError } from '../errors/outbox-admin-options.error';
import { OptionKeys, refuseUnknownKeys } from '../option-fields';

const ADMIN_KEYS = {
  guards: true,
  allowUnauthenticated: true,
  limits: true,
} satisfies OptionKeys<OutboxAdminModuleOptions>;

const ADMIN_LIMIT_KEYS = {
  maxPageSize: true,
  defaultPageSize: true,
  maxBodyBytes: true,
} satisfies OptionKeys<OutboxAdminLimits>;

const adminError = (field: string, reason: string) => new OutboxAdminOptionsError(field, reason);

/** @internal Defaults of `OutboxAdminModuleOptions.limits`. */
export const DEFAULT_ADMIN_LIMITS: OutboxAdminLimits = {
  maxPageSize: 100,
  defaultPageSize: 50,
  maxBodyBytes: 64 * 1024,
};

function positiveInt(field: string, value: number, max: number): number {
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new OutboxAdminOptionsError(
      field,
      `expected an integer from 1 to ${max}, got ${String(value)}`,
    );
  }
  return value;
}

function isGuard(value: unknown): boolean {
  // A class, or an object with a canActivate method (what Nest itself accepts in @UseGuards).
  return (
    typeof value === 'function' ||
    (typeof value === 'object' &&
      value !== null &&
      typeof (value as { canActivate?: unknown }).canActivate === 'function')
  );
}

/**
 * Applies defaults and refuses unsafe setups. Both `register` and `registerAsync` go through here,
 * so an admin API without a guard cannot bootstrap by accident.
 */
export function resolveOutboxAdminOptions(
  options: OutboxAdminModuleOptions = {},
): ResolvedOutboxAdminOptions {
  if (typeof options !== 'object' || options === null) {
    throw new OutboxAdminOptionsError('options', `expected an object, got ${String(options)}`);
  }
  refuseUnknownKeys('', options, ADMIN_KEYS, adminError);
  if (options.limits !== undefined) {
    if (typeof options.limits !== 'object' || options.limits === null) {
      throw new OutboxAdminOptionsError('limits', 'expected an object');
    }
    refuseUnknownKeys('limits', options.limits, ADMIN_LIMIT_KEYS, adminError);
  }
  const guards = options.guards ?? [];
  if (!Array.isArray(guards)) {
    throw new OutboxAdminOptionsError('guards', 'expected an array of guard classes or instances');
  }
  guards.forEach((guard, i) => {
    if (!isGuard(guard)) {
      throw new OutboxAdminOptionsError(
        `guards[${i}]`,
        'expected a guard class or an object with canActivate()',
      );
    }
  });
  const allowUnauthenticated = options.allowUnauthenticated === true;
  if (guards.length === 0 && !allowUnauthenticated) {
    throw new OutboxAdminOptionsError(
      'guards',
      'the admin API can replay and delete dead letters, so it must sit behind at least one guard: ' +
        'pass guards: [YourAuthGuard] (or, for a local tool only, allowUnauthenticated: true)',
    );
  }
  const limits = { ...DEFAULT_ADMIN_LIMITS, ...stripUndefined(options.limits ?? {}) };
  const maxPageSize = positiveInt(
    'limits.maxPageSize',
    limits.maxPageSize,
    OUTBOX_ADMIN_PAGE_SIZE_CEILING,
  );
  const defaultPageSize = positiveInt(
    'limits.defaultPageSize',
    // An explicit maxPageSize below the default page size lowers the default with it.
    options.limits?.defaultPageSize ?? Math.min(DEFAULT_ADMIN_LIMITS.defaultPageSize, maxPageSize),
    maxPageSize,
  );
  const maxBodyBytes = positiveInt(
    'limits.maxBodyBytes',
    limits.maxBodyBytes,
    Number.MAX_SAFE_INTEGER,
  );
  return {
    guards: [...guards],
    allowUnauthenticated,
    limits: { maxPageSize, defaultPageSize, maxBodyBytes },
  };
}

function stripUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
