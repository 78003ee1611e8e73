/**
 * Reading what a handler threw without throwing again. A handler may throw anything: a string,
 * `null`, a Symbol, a null-prototype object, an Error whose `name` or `message` getter throws, a
 * Proxy whose traps throw. Its outcome must still be written (retry or dead letter, Guarantees 8),
 * so every read of the thrown value goes through these.
 */

/** `value instanceof type`; false where asking throws (a Proxy's `getPrototypeOf` trap). */
export function isInstance<T>(
  value: unknown,
  type: abstract new (...args: never[]) => T,
): value is T {
  try {
    return value instanceof type;
  } catch {
    return false;
  }
}

/** `read()` as text, or `fallback` when reading or converting it throws. */
export function textOf(read: () => unknown, fallback: string): string {
  try {
    const value = read();
    return typeof value === 'string' ? value : String(value);
  } catch {
    return fallback;
  }
}

/** A thrown value that is no Error as text: JSON where it has one, else `String()`. */
export function thrownText(value: unknown): string {
  if (typeof value === 'string') return value;
  try {
    const json = JSON.stringify(value);
    if (json !== undefined) return json;
  } catch {
    // A cycle, a BigInt inside, a throwing toJSON: String() below.
  }
  return textOf(() => value, `[unprintable ${typeof value}]`);
}

/** The name and message of a thrown value, as strings. */
export function thrownNameAndMessage(value: unknown): { name: string; message: string } {
  if (!isInstance(value, Error)) return { name: typeof value, message: thrownText(value) };
  return {
    name: textOf(() => value.name, 'Error'),
    message: textOf(() => value.message, '[unreadable message]'),
  };
}
