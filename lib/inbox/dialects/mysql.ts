import { driverErrorField, InboxDialect, InboxTable } from './inbox-dialect';

// ER_LOCK_DEADLOCK: three or more transactions inserting one key while the first rolls back can
// deadlock on their shared locks. ER_LOCK_WAIT_TIMEOUT (1205) is the claim's own bound on waiting
// for a long handler: retrying would only wait again, so it is reported as "in progress".
const TRANSIENT = new Set([1213]);
const ER_LOCK_WAIT_TIMEOUT = 1205;

const LOCK_NAME =
  "(SELECT IF(CHAR_LENGTH(n) <= 64, n, SHA1(n)) FROM (SELECT CONCAT(COALESCE(DATABASE(), ''), '.', ?) AS n) AS lock_name)";

export const mysqlInboxDialect: InboxDialect = {
  name: 'mysql',
  serialTransactions: false,

  tableNames(prefix, schema): InboxTable {
    const qualify = (name: string) => (schema ? `\`${schema}\`.\`${name}\`` : `\`${name}\``);
    return {
      table: qualify(`${prefix}inbox`),
      index: `\`${prefix}inbox_processed_at_idx\``,
      plain: `${schema ? `${schema}.` : ''}${prefix}inbox`,
    };
  },

  // Binary collation: message ids are opaque, 'ABC' and 'abc' are different messages. The
  // timestamp is written in UTC explicitly because DATETIME follows the session time zone.
  createSchema: (t) => [
    `CREATE TABLE IF NOT EXISTS ${t.table} (
      consumer VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
      message_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
      processed_at DATETIME(3) NOT NULL,
      fingerprint VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
      PRIMARY KEY (consumer, message_id),
      KEY ${t.index} (processed_at)
    ) ENGINE=InnoDB`,
  ],

  dropSchema: (t) => [`DROP TABLE IF EXISTS ${t.table}`],

  // INSERT IGNORE also downgrades errors such as truncation to warnings; ids and consumers are
  // validated (length, characters) before they reach this statement so that cannot merge keys.
  claim: (t, consumer, messageId, fingerprint) => ({
    sql: `INSERT IGNORE INTO ${t.table} (consumer, message_id, processed_at, fingerprint) VALUES (?, ?, UTC_TIMESTAMP(3), ?)`,
    params: [consumer, messageId, fingerprint],
  }),

  readFingerprint: (t, consumer, messageId) => ({
    sql: `SELECT fingerprint FROM ${t.table} WHERE consumer = ? AND message_id = ?`,
    params: [consumer, messageId],
  }),

  addFingerprint: (t) =>
    `ALTER TABLE ${t.table} ADD COLUMN fingerprint VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL`,
  dropFingerprint: (t) => `ALTER TABLE ${t.table} DROP COLUMN fingerprint`,
  // ER_DUP_FIELDNAME
  isDuplicateColumn: (error) => Number(driverErrorField(error, 'errno')) === 1060,

  // innodb_lock_wait_timeout is whole seconds and per session: the pooled connection gets its
  // previous value back right after the claim.
  setLockTimeout: (ms) => ({
    sql: 'SET @nestjs_outbox_lock_wait = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = ?',
    params: [Math.max(1, Math.ceil(ms / 1000))],
  }),
  restoreLockTimeout: () => ({
    sql: 'SET SESSION innodb_lock_wait_timeout = @nestjs_outbox_lock_wait',
    params: [],
  }),
  isLockTimeout: (error) => Number(driverErrorField(error, 'errno')) === ER_LOCK_WAIT_TIMEOUT,

  deleteExpired: (t, retentionMs, batchSize) => ({
    sql: `DELETE FROM ${t.table} WHERE processed_at < UTC_TIMESTAMP(3) - INTERVAL ? MICROSECOND ORDER BY processed_at LIMIT ?`,
    params: [Math.round(retentionMs * 1000), batchSize],
  }),

  // GET_LOCK names are server-wide and at most 64 characters: qualify them with the database
  // (two apps with one prefix in different databases must not share a lock) and hash long ones.
  tryLock: (name) => ({ sql: `SELECT GET_LOCK(${LOCK_NAME}, 0) AS locked`, params: [name] }),
  unlock: (name) => ({ sql: `SELECT RELEASE_LOCK(${LOCK_NAME}) AS unlocked`, params: [name] }),

  isTransient: (error) => TRANSIENT.has(Number(driverErrorField(error, 'errno'))),
};
