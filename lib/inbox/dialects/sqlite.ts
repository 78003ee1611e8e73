import { driverErrorField, InboxDialect, InboxTable } from './inbox-dialect';

// Milliseconds since the epoch by SQLite's clock, so retention uses one clock for write and check.
const NOW_MS = `CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`;

export const sqliteInboxDialect: InboxDialect = {
  name: 'sqlite',
  serialTransactions: true,

  tableNames(prefix): InboxTable {
    return {
      table: `"${prefix}inbox"`,
      index: `"${prefix}inbox_processed_at_idx"`,
      plain: `${prefix}inbox`,
      name: `${prefix}inbox`,
    };
  },

  createSchema: (t) => [
    `CREATE TABLE IF NOT EXISTS ${t.table} (
      consumer TEXT NOT NULL,
      message_id TEXT NOT NULL,
      processed_at INTEGER NOT NULL,
      fingerprint TEXT,
      PRIMARY KEY (consumer, message_id)
    )`,
    `CREATE INDEX IF NOT EXISTS ${t.index} ON ${t.table} (processed_at)`,
  ],

  dropSchema: (t) => [`DROP TABLE IF EXISTS ${t.table}`],

  // No row lock to wait on: the inbox runs one transaction at a time here.
  claim: (t, consumer, messageId, fingerprint) => ({
    claim: {
      sql: `INSERT OR IGNORE INTO ${t.table} (consumer, message_id, processed_at, fingerprint) VALUES (?, ?, ${NOW_MS}, ?)`,
      params: [consumer, messageId, fingerprint],
    },
  }),

  readFingerprint: (t, consumer, messageId) => ({
    sql: `SELECT fingerprint FROM ${t.table} WHERE consumer = ? AND message_id = ?`,
    params: [consumer, messageId],
  }),

  addFingerprint: (t) => `ALTER TABLE ${t.table} ADD COLUMN fingerprint TEXT`,
  dropFingerprint: (t) => `ALTER TABLE ${t.table} DROP COLUMN fingerprint`,
  hasFingerprint: (t) => ({
    sql: `SELECT 1 FROM pragma_table_info(?) WHERE name = 'fingerprint'`,
    params: [t.name],
  }),
  isDuplicateColumn: (error) =>
    error instanceof Error && /duplicate column name/i.test(error.message),

  // DELETE … LIMIT needs a compile-time option SQLite builds usually lack.
  deleteExpired: (t, retentionMs, batchSize) => ({
    sql: `DELETE FROM ${t.table} WHERE rowid IN (
      SELECT rowid FROM ${t.table} WHERE processed_at < ${NOW_MS} - ? LIMIT ?)`,
    params: [retentionMs, batchSize],
  }),

  isLockTimeout: () => false,

  tryLock: () => null,
  unlock: () => null,

  isTransient: (error) => String(driverErrorField(error, 'code')).startsWith('SQLITE_BUSY'),
};
