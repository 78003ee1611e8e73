/** The inbox table's names, quoted for one dialect. */
export interface InboxTable {
  /** Qualified, quoted table name for SQL text. */
  table: string;
  /** Quoted index name on `processed_at`. */
  index: string;
  /** Unquoted name, used to build lock names. */
  plain: string;
  /** The table's own name and its schema (database on MySQL), unquoted, for catalog lookups. */
  name: string;
  schema?: string;
}

/** A statement and its positional parameters. */
export interface InboxStatement {
  sql: string;
  params: unknown[];
}

/**
 * A claim whose wait on a concurrent claim of the same key is bounded. Where the bound can travel
 * inside the claim statement itself (PostgreSQL, MariaDB) `bound` and `restore` are absent, so a
 * run sends what a hand-written claim sends: BEGIN, the claim, the work, COMMIT.
 */
export interface InboxClaim {
  /** Sent before `claim`: bounds the wait, remembering the setting it replaces. */
  bound?: InboxStatement;
  /** Affects one row when it took the key, none when the message was already processed. */
  claim: InboxStatement;
  /** Sent after `claim`, also after a failed one: puts back what `bound` replaced. */
  restore?: InboxStatement;
}

/**
 * The inbox SQL of one database family. Claims are single insert-or-ignore statements whose
 * affected row count says whether this transaction took the message, so two deliveries can
 * never both pass a check that precedes the write.
 */
export interface InboxDialect {
  readonly name: 'postgres' | 'mysql' | 'sqlite';
  tableNames(tablePrefix: string, schema?: string): InboxTable;
  /** Idempotent DDL for the table (current version) and its retention index. */
  createSchema(t: InboxTable): string[];
  dropSchema(t: InboxTable): string[];
  /**
   * Version 1 → 2: the request fingerprint column (HTTP idempotency keys, docs/guarantees.md, Guarantees 16). Fails
   * with `isDuplicateColumn` when another process added it first.
   */
  addFingerprint(t: InboxTable): string;
  dropFingerprint(t: InboxTable): string;
  /** A row when the table has version 2's `fingerprint` column, none otherwise. */
  hasFingerprint(t: InboxTable): InboxStatement;
  isDuplicateColumn(error: unknown): boolean;
  /**
   * Claims `(consumer, messageId)`: takes it, or finds it already processed. The claim waits at
   * most `lockTimeoutMs` on a concurrent uncommitted claim of the same key (then fails with
   * `isLockTimeout`); the consumer's work after it runs with the session's own setting. SQLite
   * has no row lock to wait on (one transaction at a time).
   */
  claim(
    t: InboxTable,
    consumer: string,
    messageId: string,
    fingerprint: string | null,
    lockTimeoutMs: number,
  ): InboxClaim;
  /** The stored fingerprint of a processed message, as column `fingerprint`. */
  readFingerprint(t: InboxTable, consumer: string, messageId: string): InboxStatement;
  /**
   * Where one dialect serves several servers (MySQL and MariaDB): asked once per store before
   * its first claim, it picks the dialect to claim with on this server.
   */
  forServer?: { sql: string; pick(rows: Record<string, unknown>[]): InboxDialect };
  /** The claim gave up waiting on the row lock of a concurrent claim. */
  isLockTimeout(error: unknown): boolean;
  /** Deletes at most `batchSize` records processed more than `retentionMs` ago (store clock). */
  deleteExpired(t: InboxTable, retentionMs: number, batchSize: number): InboxStatement;
  /**
   * Session lock so only one process cleans at a time; `null` when the database has no
   * cross-process lock worth taking (SQLite is one process by design).
   */
  tryLock(name: string): InboxStatement | null;
  unlock(name: string): InboxStatement | null;
  /** Deadlocks, serialization failures, busy database: the claim can simply be tried again. */
  isTransient(error: unknown): boolean;
  /**
   * TypeORM gives SQLite one shared connection, so two open transactions would interleave on it;
   * the inbox runs its transactions one at a time there.
   */
  readonly serialTransactions: boolean;
}

/**
 * Reads a driver error code through TypeORM's `QueryFailedError.driverError` wrapper, on the error
 * itself (node-postgres, Kysely), or on its `cause` (Drizzle's `DrizzleQueryError`).
 */
export function driverErrorField(error: unknown, field: string): unknown {
  if (typeof error !== 'object' || error === null) return undefined;
  const record = error as Record<string, unknown>;
  const driverError = record.driverError as Record<string, unknown> | undefined;
  const cause = record.cause as Record<string, unknown> | undefined;
  return (
    driverError?.[field] ??
    record[field] ??
    (typeof cause === 'object' ? cause?.[field] : undefined)
  );
}

export const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,47}$/;
