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
  // statement, one round trip: `cfg` sets a transaction-local lock_timeout before the insert
  // reads its row from it; the outer SELECT puts the previous value back once `count(*)` has read
  // every row of `ins`, i.e. after the insert ran, so the consumer's work runs with the session's
  // own setting. A failed claim rolls back, which ends the local setting too.
  claim: (t, consumer, messageId, fingerprint, lockTimeoutMs) => ({
    claim: {
      sql: `WITH cfg AS MATERIALIZED (
        SELECT current_setting('lock_timeout') AS previous, set_config('lock_timeout', $4::text, true) AS bounded),
      ins AS (
        INSERT INTO ${t.table} (consumer, message_id, fingerprint)
        SELECT $1::varchar, $2::varchar, $3::varchar FROM cfg
        ON CONFLICT DO NOTHING RETURNING 1)
      SELECT n.claimed, set_config('lock_timeout', cfg.previous, true) AS restored
      FROM cfg, (SELECT count(*)::int AS claimed FROM ins) AS n`,
      params: [consumer, messageId, fingerprint, `${Math.max(1, Math.ceil(lockTimeoutMs))}ms`],
    },
    result: 'claimed',
  }),

  readFingerprint: (t, consumer, messageId) => ({
    sql: `SELECT fingerprint FROM ${t.table} WHERE consumer = $1 AND message_id = $2`,
    params: [consumer, messageId],
  }),

  addFingerprint: (t) => `ALTER TABLE ${t.table} ADD COLUMN fingerprint varchar(64)`,
  dropFingerprint: (t) => `ALTER TABLE ${t.table} DROP COLUMN fingerprint`,
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
