import { OutboxOptionsError } from '../../../errors/outbox-options.error';
import { raw, SqlText } from '../sql';

/** @default 'outbox_' */
export const DEFAULT_TABLE_PREFIX = 'outbox_';

// Table names (prefix + 'schema_version') stay within the 63-character limit of PostgreSQL and
// the 64 of MySQL; derived index and constraint names are cut to fit (see `name`).
const PREFIX_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,39}$/;
/**
 * Longest derived (index, constraint) name. PostgreSQL cuts longer identifiers to 63 characters
 * itself; cutting them the same way here keeps those names and lets MySQL (which refuses names
 * over 64) take the longest prefixes too. Cut names stay distinct.
 */
const DERIVED_NAME_MAX = 63;
const SCHEMA_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

export interface OutboxTableOptions {
  tablePrefix?: string;
  /** PostgreSQL schema; ignored by other databases. */
  schema?: string;
}

/** Quoted, qualified names of the outbox tables and indexes. */
export interface OutboxTableNames {
  prefix: string;
  schema: string | null;
  events: SqlText;
  /** Open work only (pending and leased deliveries): the only table the claim reads. */
  deliveries: SqlText;
  /** Dead letters, moved out of `deliveries` so the claim never passes over them. */
  deadLetters: SqlText;
  version: SqlText;
  /** A quoted name derived from the prefix (indexes, constraints), unqualified. */
  name(suffix: string): SqlText;
  /** Plain text form used for lock names. */
  lockName: string;
}

export function validateTableOptions(options: OutboxTableOptions): {
  prefix: string;
  schema: string | null;
} {
  const prefix = options.tablePrefix ?? DEFAULT_TABLE_PREFIX;
  if (!PREFIX_PATTERN.test(prefix)) {
    throw new OutboxOptionsError(
      'store.tablePrefix',
      `"${prefix}" must be 1–40 characters of letters, digits and underscores, starting with a letter or underscore`,
    );
  }
  const schema = options.schema ?? null;
  if (schema !== null && !SCHEMA_PATTERN.test(schema)) {
    throw new OutboxOptionsError(
      'store.schema',
      `"${schema}" must be 1–63 characters of letters, digits and underscores, starting with a letter or underscore`,
    );
  }
  return { prefix, schema };
}

/** Builds table names with the dialect's identifier quote (validated names never contain it). */
export function tableNames(
  options: OutboxTableOptions,
  quote: string,
  useSchema: boolean,
): OutboxTableNames {
  const { prefix, schema } = validateTableOptions(options);
  const q = (name: string) => `${quote}${name}${quote}`;
  const qualified = (name: string) =>
    raw(useSchema && schema ? `${q(schema)}.${q(name)}` : q(name));
  return {
    prefix,
    schema: useSchema ? schema : null,
    events: qualified(`${prefix}events`),
    deliveries: qualified(`${prefix}deliveries`),
    deadLetters: qualified(`${prefix}dead_letters`),
    version: qualified(`${prefix}schema_version`),
    name: (suffix) => raw(q(`${prefix}${suffix}`.slice(0, DERIVED_NAME_MAX))),
    // The schema is not part of it: PostgreSQL keys its locks by the effective schema (dialect).
    lockName: `nestjs-outbox:${prefix}`,
  };
}
