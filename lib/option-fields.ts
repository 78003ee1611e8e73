import { OutboxOptionsError } from './errors/outbox-options.error';

/** Option readers shared by every options resolver: they name the option path in their errors. */

export function positiveInt(field: string, value: unknown, fallback: number, min = 1): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min) {
    throw new OutboxOptionsError(
      field,
      `expected an integer ≥ ${min}, got ${JSON.stringify(value)}`,
    );
  }
  return value;
}

export function fraction(field: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !(value >= 0 && value <= 1)) {
    throw new OutboxOptionsError(
      field,
      `expected a number between 0 and 1, got ${JSON.stringify(value)}`,
    );
  }
  return value;
}

export function plainObject(field: string, value: unknown): Record<string, unknown> {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new OutboxOptionsError(field, `expected an object, got ${JSON.stringify(value)}`);
  }
  return value as Record<string, unknown>;
}
