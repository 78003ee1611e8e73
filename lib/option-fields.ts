import { OutboxOptionsError } from './errors/outbox-options.error';

/** Option readers shared by every options resolver: they name the option path in their errors. */

/** A refused value as an error says it: JSON, but NaN and ±Infinity as themselves (JSON: null). */
export function shown(value: unknown): string {
  return typeof value === 'number' ? String(value) : String(JSON.stringify(value));
}

export function positiveInt(
  field: string,
  value: unknown,
  fallback: number,
  min = 1,
  max = Number.MAX_SAFE_INTEGER,
): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `≥ ${min}` : `from ${min} to ${max}`;
    throw new OutboxOptionsError(field, `expected an integer ${range}, got ${shown(value)}`);
  }
  return value;
}

export function fraction(field: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !(value >= 0 && value <= 1)) {
    throw new OutboxOptionsError(field, `expected a number between 0 and 1, got ${shown(value)}`);
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

/**
 * The keys of an options interface, written as `{ key: true, … } satisfies OptionKeys<T>` so the
 * compiler checks the list is complete and has nothing extra.
 */
export type OptionKeys<T> = Record<keyof Required<T>, true>;

/**
 * Refuses keys of an options object that are not options (a typo would otherwise be ignored and
 * its default silently used), suggesting the closest known key. Only `value`'s own keys are read:
 * values that are user objects (a DataSource, an ioredis client) are never walked into.
 */
export function refuseUnknownKeys(
  path: string,
  value: object,
  keys: Record<string, true>,
  error: (field: string, reason: string) => Error = (field, reason) =>
    new OutboxOptionsError(field, reason),
): void {
  const known = Object.keys(keys);
  const at = (key: string) => (path === '' ? key : `${path}.${key}`);
  for (const key of Object.keys(value)) {
    if (known.includes(key)) continue;
    const closest = closestKey(key, known);
    throw error(
      at(key),
      closest === undefined
        ? `not an option; the options here are ${known.join(', ')}`
        : `not an option; did you mean ${at(closest)}?`,
    );
  }
}

function closestKey(key: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of known) {
    const distance = editDistance(key.toLowerCase(), candidate.toLowerCase());
    if (distance < bestDistance) [best, bestDistance] = [candidate, distance];
  }
  // Far-off suggestions mislead more than they help: allow about one edit per three characters,
  // else take the key sharing the longest start (`allowInProd`, `logging`) if it shares 3 or more.
  if (bestDistance <= Math.max(2, Math.floor(key.length / 3))) return best;
  let longest = 2;
  best = undefined;
  for (const candidate of known) {
    let n = 0;
    while (n < key.length && key[n].toLowerCase() === candidate[n]?.toLowerCase()) n++;
    if (n > longest) [best, longest] = [candidate, n];
  }
  return best;
}

/**
 * Edits between two keys, a swap of two neighbouring letters counting as one (`kye` is one edit
 * from `key`, two from `type`): the optimal string alignment distance.
 */
function editDistance(a: string, b: string): number {
  let beforePrevious: number[] = [];
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(
        previous[j] + 1,
        current[j - 1] + 1,
        previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        current[j] = Math.min(current[j], beforePrevious[j - 2] + 1);
    }
    beforePrevious = previous;
    previous = current;
  }
  return previous[b.length];
}
