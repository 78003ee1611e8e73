/**
 * A fragment of SQL with its parameters, written with `?` placeholders. Dialects turn `?` into
 * their own placeholder style when the statement runs, so shared SQL is written once. Values only
 * ever travel as parameters; identifiers are validated before they become `raw` text.
 */
export class SqlText {
  constructor(
    readonly text: string,
    readonly params: readonly unknown[],
    /** A hot statement of fixed text: dialects that can may keep it prepared per connection. */
    readonly prepare = false,
  ) {}
}

/**
 * Marks a whole statement as one to keep prepared. Only for statements whose text does not vary
 * with their values (arrays instead of IN lists, limits as parameters): a server keeps one
 * prepared statement per text and connection.
 */
export function prepared(stmt: SqlText): SqlText {
  return new SqlText(stmt.text, stmt.params, true);
}

/** Tagged template: interpolated `SqlText` is inlined, anything else becomes a parameter. */
export function sql(strings: TemplateStringsArray, ...values: unknown[]): SqlText {
  let text = strings[0] ?? '';
  const params: unknown[] = [];
  values.forEach((value, i) => {
    if (value instanceof SqlText) {
      text += value.text;
      params.push(...value.params);
    } else {
      text += '?';
      params.push(value);
    }
    text += strings[i + 1] ?? '';
  });
  return new SqlText(text, params);
}

/** Trusted SQL text (keywords, validated identifiers). */
export function raw(text: string): SqlText {
  return new SqlText(text, []);
}

export function join(parts: readonly SqlText[], separator = ', '): SqlText {
  return new SqlText(
    parts.map((p) => p.text).join(separator),
    parts.flatMap((p) => p.params),
  );
}

/** `?, ?, ?` for an IN list; an empty list becomes `NULL`, which matches nothing. */
export function list(values: readonly unknown[]): SqlText {
  return values.length === 0 ? raw('NULL') : join(values.map((v) => sql`${v}`));
}

export const EMPTY = raw('');
