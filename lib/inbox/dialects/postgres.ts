import { driverErrorField, InboxDialect, InboxTable } from './inbox-dialect';

// 40001 serialization_failure (REPEATABLE READ / SERIALIZABLE meeting a concurrent claim),
// 40P01 deadlock_detected. 55P03 lock_not_available is the claim's own lock timeout: retrying
// would only wait again, so it is reported as "in progress" instead.
const TRANSIENT = new Set(['40001', '40P01']);

export const postgresInboxDialect: InboxDialect = {
  name: 'postgres',
  serialTransactions: false,

  tableNames(prefix, schema): InboxTable {
    const qualify = (name: string) => (schema ? `"${schema}"."${name}"` : `"${name}"`);
    return {
      table: qualify(`${prefix}inbox`),
      index: `"${prefix}inbox_processed_at_idx"`,
      plain: `${schema ? `${schema}.` : ''}${prefix}inbox`,
      name: `${prefix}inbox`,
      schema,
    };
  },

  createSchema: (t) => [
    `CREATE TABLE IF NOT EXISTS ${t.table} (
      consumer varchar(255) NOT NULL,
      message_id varchar(255) NOT NULL,
      processed_at timestamptz NOT NULL DEFAULT now(),
      fingerprint varchar(64),
      PRIMARY KEY (consumer, message_id)
    )`,
    `CREATE INDEX IF NOT EXISTS ${t.index} ON ${t.table} (processed_at)`,
  ],

  dropSchema: (t) => [`DROP TABLE IF EXISTS ${t.table}`],

  // A concurrent uncommitted claim of the same key makes this wait on the row lock and then
  // either skip (it committed) or insert (it rolled back). The wait is bounded in the same
  // statement, one round trip: the one-time filter saves the session's lock_timeout and sets a
  // transaction-local bound before the row reaches the insert (the inner set_config is an
  // argument of the outer one, so it runs first); RETURNING, evaluated once the row is inserted,
  // puts the saved value back for the consumer's work. A claim that inserts nothing (duplicate)
  // or fails is rolled back, which ends the local settings too.
  claim: (t, consumer, messageId, fingerprint, lockTimeoutMs) => ({
    claim: {
      sql: `INSERT INTO ${t.table} (consumer, message_id, fingerprint)
      SELECT $1, $2, $3
      WHERE set_config('lock_timeout', $4 || left(set_config('nestjs_outbox.lock_timeout', current_setting('lock_timeout'), true), 0), true) IS NOT NULL
      ON CONFLICT DO NOTHING
      RETURNING set_config('lock_timeout', current_setting('nestjs_outbox.lock_timeout'), true) AS restored`,
      params: [consumer, messageId, fingerprint, `${Math.max(1, Math.ceil(lockTimeoutMs))}ms`],
    },
  }),

  readFingerprint: (t, consumer, messageId) => ({
    sql: `SELECT fingerprint FROM ${t.table} WHERE consumer = $1 AND message_id = $2`,
    params: [consumer, messageId],
  }),

  addFingerprint: (t) => `ALTER TABLE ${t.table} ADD COLUMN fingerprint varchar(64)`,
  dropFingerprint: (t) => `ALTER TABLE ${t.table} DROP COLUMN fingerprint`,
  hasFingerprint: (t) => ({
    sql: `SELECT 1 FROM information_schema.columns
      WHERE table_schema = COALESCE($1::text, current_schema()) AND table_name = $2 AND column_name = 'fingerprint'`,
    params: [t.schema ?? null, t.name],
  }),
  // 42701 duplicate_column
  isDuplicateColumn: (error) => driverErrorField(error, 'code') === '42701',

  isLockTimeout: (error) => driverErrorField(error, 'code') === '55P03',

  deleteExpired: (t, retentionMs, batchSize) => ({
    sql: `DELETE FROM ${t.table} WHERE (consumer, message_id) IN (
      SELECT consumer, message_id FROM ${t.table}
      WHERE processed_at < now() - ($1::double precision * interval '1 millisecond')
      LIMIT $2 FOR UPDATE SKIP LOCKED)`,
    params: [retentionMs, batchSize],
  }),

  tryLock: (name) => ({
    sql: 'SELECT pg_try_advisory_lock(hashtext($1)) AS locked',
    params: [name],
  }),
  unlock: (name) => ({
    sql: 'SELECT pg_advisory_unlock(hashtext($1)) AS unlocked',
    params: [name],
  }),

  isTransient: (error) => TRANSIENT.has(String(driverErrorField(error, 'code'))),
};
