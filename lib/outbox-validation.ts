import { newId } from './ids';
import { OutboxValidationError } from './errors/outbox-validation.error';
import { OutboxEventInput } from './interfaces/outbox-event.interface';
import { OutboxLimits } from './interfaces/outbox-module-options.interface';
import { AppendableEvent } from './interfaces/outbox-store.interface';
import { OptionKeys, refuseUnknownKeys } from './option-fields';
import { rememberPayloadText } from './stores/payload-text';

const TYPE_PATTERN = /^[A-Za-z0-9._:-]+$/;
// eslint-disable-next-line no-control-regex
const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f]/;
const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;

/**
 * Why a string cannot be stored as given on every store, or `null`: a NUL (PostgreSQL refuses it
 * in text, a driver error at commit) or a lone UTF-16 surrogate (drivers write U+FFFD or drop it,
 * so two distinct values would become one row's key; docs/guarantees.md, Limits).
 */
export function unstorableText(text: string): string | null {
  if (text.includes('\u0000')) {
    return 'contains a NUL character (\\u0000), which PostgreSQL cannot store';
  }
  if (!(text as string & { isWellFormed(): boolean }).isWellFormed()) {
    return 'is not well-formed Unicode: it contains a lone UTF-16 surrogate, which database drivers replace with U+FFFD';
  }
  return null;
}

/** `an instance of Map`: what kind of object was given instead of a plain one. */
function describeObject(value: object): string {
  const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === 'string' && name !== '' && name !== 'Object'
    ? `an instance of ${name}`
    : 'an object whose prototype is not Object.prototype';
}

/**
 * An event's fields. Another one is refused, not dropped: a misspelt `kye` would append the event
 * without its key, outside its key's order (docs/guarantees.md, Guarantees 6), without a word.
 */
const EVENT_FIELDS = {
  id: true,
  type: true,
  payload: true,
  key: true,
  headers: true,
  occurredAt: true,
  availableAt: true,
} satisfies OptionKeys<OutboxEventInput>;

const eventFieldError = (field: string, reason: string) =>
  new OutboxValidationError(
    field,
    reason
      .replace('not an option; the options here are', 'not an event field; the fields are')
      .replace('not an option', 'not an event field'),
  );

export function isUuid(value: unknown): value is string {
  return typeof value === 'string' && UUID_PATTERN.test(value);
}

// An ISO-8601 calendar date, optionally with a time and an offset (what `Date` parses reliably).
const ISO_DATE =
  /^([+-]\d{6}|\d{4})-(\d{2})-(\d{2})(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:\d{2})?)?$/;
// The range every store can hold (MySQL/MariaDB DATETIME: years 1000–9999).
const MIN_TIME = Date.UTC(1000, 0, 1);
const MAX_TIME = Date.UTC(10000, 0, 1) - 1;

function toDate(field: string, value: unknown): Date | null {
  if (value === undefined || value === null) return null;
  let date: Date | null = null;
  if (value instanceof Date) date = value;
  else if (typeof value === 'string') {
    // `Date` also reads "1", "March 7" and rolls "02-30" over to March: refuse what is not ISO.
    const iso = ISO_DATE.exec(value);
    if (iso) {
      const [year, month, day] = [Number(iso[1]), Number(iso[2]), Number(iso[3])];
      const lastDay = new Date(0);
      lastDay.setUTCFullYear(year, month, 0);
      if (month >= 1 && month <= 12 && day >= 1 && day <= lastDay.getUTCDate()) {
        date = new Date(value);
      }
    }
  }
  if (!date || Number.isNaN(date.getTime())) {
    throw new OutboxValidationError(field, 'expected a Date or an ISO-8601 string');
  }
  if (date.getTime() < MIN_TIME || date.getTime() > MAX_TIME) {
    throw new OutboxValidationError(
      field,
      `${date.toISOString()} is outside years 1000–9999, the range every store can hold`,
    );
  }
  return date;
}

/**
 * Checks one event against the limits in docs/guarantees.md (Limits; Guarantees 15) and normalizes it. `path` prefixes field
 * names in errors (`events[3]`), so the caller learns exactly which value to fix.
 */
export function validateEvent(
  input: OutboxEventInput,
  limits: OutboxLimits,
  path: string,
): AppendableEvent {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new OutboxValidationError(path, 'expected an event object { type, payload, ... }');
  }
  refuseUnknownKeys(path, input, EVENT_FIELDS, eventFieldError);
  const { id, type, payload, key, headers } = input;
  if (id !== undefined && !isUuid(id)) {
    throw new OutboxValidationError(
      `${path}.id`,
      'expected a UUID (or omit it to have one generated)',
    );
  }
  if (
    typeof type !== 'string' ||
    type.length < 1 ||
    type.length > limits.typeMaxLength ||
    !TYPE_PATTERN.test(type)
  ) {
    throw new OutboxValidationError(
      `${path}.type`,
      `expected 1–${limits.typeMaxLength} characters of [A-Za-z0-9._:-], got ${JSON.stringify(type)?.slice(0, 80)}`,
    );
  }
  if (key !== undefined && key !== null) {
    if (typeof key === 'string' && unstorableText(key)) {
      throw new OutboxValidationError(`${path}.key`, unstorableText(key)!);
    }
    if (
      typeof key !== 'string' ||
      key.length < 1 ||
      key.length > limits.keyMaxLength ||
      CONTROL_CHARACTERS.test(key)
    ) {
      throw new OutboxValidationError(
        `${path}.key`,
        `expected a string of 1–${limits.keyMaxLength} characters without control characters, or null`,
      );
    }
  }
  if (payload === undefined) {
    throw new OutboxValidationError(
      `${path}.payload`,
      'is required (use null for an empty payload)',
    );
  }
  let serialized: string | undefined;
  try {
    serialized = JSON.stringify(payload);
  } catch (error) {
    throw new OutboxValidationError(
      `${path}.payload`,
      `is not JSON-serializable: ${(error as Error).message}`,
    );
  }
  if (serialized === undefined) {
    throw new OutboxValidationError(`${path}.payload`, 'is not JSON-serializable');
  }
  // A UTF-16 unit is at most 3 bytes of UTF-8: only a text that could exceed the limit is counted.
  const bytes =
    serialized.length * 3 <= limits.payloadMaxBytes ? 0 : Buffer.byteLength(serialized, 'utf8');
  if (bytes > limits.payloadMaxBytes) {
    throw new OutboxValidationError(
      `${path}.payload`,
      `serializes to ${bytes} bytes, over the limit of ${limits.payloadMaxBytes} (limits.payloadMaxBytes)`,
    );
  }
  const normalizedHeaders: Record<string, string> = {};
  if (headers !== undefined && headers !== null) {
    if (typeof headers !== 'object' || Array.isArray(headers)) {
      throw new OutboxValidationError(`${path}.headers`, 'expected an object of string values');
    }
    // Only own enumerable fields are read: a Map, a class instance or a Date would be stored as
    // `{}`, its entries dropped without a word.
    const proto: unknown = Object.getPrototypeOf(headers);
    if (proto !== Object.prototype && proto !== null) {
      throw new OutboxValidationError(
        `${path}.headers`,
        `expected a plain object of string values, got ${describeObject(headers)} (for a Map: Object.fromEntries(map))`,
      );
    }
    const entries = Object.entries(headers);
    if (entries.length > limits.headersMaxCount) {
      throw new OutboxValidationError(
        `${path}.headers`,
        `has ${entries.length} entries, over the limit of ${limits.headersMaxCount}`,
      );
    }
    for (const [name, value] of entries) {
      if (name.length < 1 || name.length > limits.headerNameMaxLength) {
        throw new OutboxValidationError(
          `${path}.headers`,
          `header name "${name.slice(0, 40)}" must be 1–${limits.headerNameMaxLength} characters`,
        );
      }
      const nameFault = unstorableText(name);
      if (nameFault) {
        throw new OutboxValidationError(
          `${path}.headers`,
          `header name ${JSON.stringify(name.slice(0, 40))} ${nameFault}`,
        );
      }
      if (typeof value !== 'string' || value.length > limits.headerValueMaxLength) {
        throw new OutboxValidationError(
          `${path}.headers.${name}`,
          `expected a string of at most ${limits.headerValueMaxLength} characters`,
        );
      }
      const valueFault = unstorableText(value);
      if (valueFault) throw new OutboxValidationError(`${path}.headers.${name}`, valueFault);
      // Defined, not assigned: assigning `__proto__` would drop the header (docs/guarantees.md, Limits).
      Object.defineProperty(normalizedHeaders, name, {
        value,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
  }
  const event: AppendableEvent = {
    // Lower-case, so every store (PostgreSQL returns uuid columns lower-cased) agrees on ids.
    id: (id ?? newId()).toLowerCase(),
    type,
    // Round-trip through JSON so what is stored is exactly what handlers will read back; the
    // text is what the store writes (serialized once, see payload-text).
    payload: JSON.parse(serialized),
    key: key ?? null,
    headers: normalizedHeaders,
    occurredAt: toDate(`${path}.occurredAt`, input.occurredAt) ?? new Date(),
    availableAt: toDate(`${path}.availableAt`, input.availableAt),
    // The service fills in the handlers registered for the type.
    handlers: [],
  };
  rememberPayloadText(event, serialized);
  return event;
}
