/**
 * Dates the admin API accepts, in filters, `availableAt` and cursors. Every store can hold them:
 * outside this range PostgreSQL fails with "timestamp out of range", MySQL's DATETIME stops at
 * year 9999 and starts at year 1000, and a request naming such a date is a mistake anyway.
 */
export const OUTBOX_ADMIN_DATE_RANGE = {
  earliest: new Date('1970-01-01T00:00:00.000Z'),
  latest: new Date('9999-12-31T23:59:59.999Z'),
} as const;

/** A valid `Date` within `OUTBOX_ADMIN_DATE_RANGE`. */
export function isAdminDate(value: unknown): value is Date {
  if (!(value instanceof Date)) return false;
  const time = value.getTime();
  return (
    time >= OUTBOX_ADMIN_DATE_RANGE.earliest.getTime() &&
    time <= OUTBOX_ADMIN_DATE_RANGE.latest.getTime()
  );
}
