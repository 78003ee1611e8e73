import { Transform } from 'class-transformer';
import { ValidateBy, ValidateIf, isISO8601 } from 'class-validator';
import { isAdminDate } from '../outbox-admin-dates';

/** Name of the constraint `IsOptionalNotNull` adds; the admin pipe reports it alone. */
export const IS_NOT_NULL = 'isNotNull';

/**
 * `@IsOptional()` for an absent field only. class-validator's own skips `null` as well, which then
 * reached the stores as "no criterion" (a `{"filter":{"type":null}}` purge emptied a Redis store
 * without `all: true`) or crashed them; here `null` is refused with a message naming the field.
 */
export function IsOptionalNotNull(): PropertyDecorator {
  const validateIfPresent = ValidateIf((_object: unknown, value: unknown) => value !== undefined);
  const notNull = ValidateBy({
    name: IS_NOT_NULL,
    validator: {
      validate: (value: unknown) => value !== null,
      defaultMessage: () => '$property must not be null; leave the field out instead',
    },
  });
  return (target, property) => {
    validateIfPresent(target, property);
    notNull(target, property);
  };
}

/** ISO-8601 text to a Date; anything else is left as is for `@IsAdminDate()` to reject. */
export const ToDate = () =>
  Transform(({ value }: { value: unknown }) =>
    typeof value === 'string' && isISO8601(value, { strict: true }) ? new Date(value) : value,
  );

/** An ISO-8601 date-time from 1970 to 9999 (`OUTBOX_ADMIN_DATE_RANGE`), as a `Date`. */
export function IsAdminDate(): PropertyDecorator {
  const toDate = ToDate();
  const inRange = ValidateBy({
    name: 'isAdminDate',
    validator: {
      validate: (value: unknown) => isAdminDate(value),
      defaultMessage: () => '$property must be an ISO-8601 date-time from 1970 to 9999',
    },
  });
  return (target, property) => {
    toDate(target, property);
    inRange(target, property);
  };
}
