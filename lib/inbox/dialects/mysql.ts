import { driverErrorField, InboxDialect, InboxStatement, InboxTable } from './inbox-dialect';

// ER_LOCK_DEADLOCK: three or more transactions inserting one key while the first rolls back can
// deadlock on their shared locks. ER_LOCK_WAIT_TIMEOUT (1205) is the claim's own bound on waiting
// for a long handler: retrying would only wait again, so it is reported as "in progress".
const TRANSIENT = new Set([1213]);
const ER_LOCK_WAIT_TIMEOUT = 1205;

/** innodb_lock_wait_timeout counts whole seconds, at least 1. */
function lockWaitSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

function insertIgnore(
  t: InboxTable,
  consumer: string,
  messageId: string,
  fingerprint: string | null,
): InboxStatement {
  return {
    sql: `INSERT IGNORE INTO ${t.table} (consumer, message_id, processed_at, fingerprint) VALUES (?, ?, UTC_TIMESTAMP(3), ?)`,
    params: [consumer, messageId, fingerprint],
  };
}

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
      name: `${prefix}inbox`,
      schema,
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
  // MySQL cannot set innodb_lock_wait_timeout for one statement (SET_VAR does not take InnoDB
  // variables), so the bound is two more statements: whole seconds and per session, the pooled
  // connection gets its previous value back right after the claim.
  claim: (t, consumer, messageId, fingerprint, lockTimeoutMs) => ({
    bound: {
      sql: 'SET @nestjs_outbox_lock_wait = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = ?',
      params: [lockWaitSeconds(lockTimeoutMs)],
    },
    claim: insertIgnore(t, consumer, messageId, fingerprint),
    restore: {
      sql: 'SET SESSION innodb_lock_wait_timeout = @nestjs_outbox_lock_wait',
      params: [],
    },
  }),

  readFingerprint: (t, consumer, messageId) => ({
    sql: `SELECT fingerprint FROM ${t.table} WHERE consumer = ? AND message_id = ?`,
    params: [consumer, messageId],
  }),

  addFingerprint: (t) =>
    `ALTER TABLE ${t.table} ADD COLUMN fingerprint VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL`,
  dropFingerprint: (t) => `ALTER TABLE ${t.table} DROP COLUMN fingerprint`,
  hasFingerprint: (t) => ({
    sql: `SELECT 1 FROM information_schema.columns
      WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND column_name = 'fingerprint'`,
    params: [t.schema ?? null, t.name],
  }),
  // ER_DUP_FIELDNAME
  isDuplicateColumn: (error) => Number(driverErrorField(error, 'errno')) === 1060,

  // TypeORM strips the server name from the version it keeps; MariaDB says it in VERSION().
  forServer: {
    sql: 'SELECT VERSION() AS version',
    pick: (rows) =>
      /mariadb/i.test(String(rows[0]?.version)) ? mariadbInboxDialect : mysqlInboxDialect,
  },
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

/**
 * MariaDB: `SET STATEMENT … FOR` sets innodb_lock_wait_timeout for the claim alone and puts the
 * session's value back by itself, so the bound costs no statement of its own. The seconds are a
 * computed integer written into the text (SET STATEMENT takes constants only).
 */
export const mariadbInboxDialect: InboxDialect = {
  ...mysqlInboxDialect,
  forServer: undefined,
  claim: (t, consumer, messageId, fingerprint, lockTimeoutMs) => {
    const insert = insertIgnore(t, consumer, messageId, fingerprint);
    const seconds = lockWaitSeconds(lockTimeoutMs);
    if (!Number.isSafeInteger(seconds)) throw new RangeError(`lockTimeoutMs ${lockTimeoutMs}`);
    return {
      claim: {
        sql: `SET STATEMENT innodb_lock_wait_timeout = ${seconds} FOR ${insert.sql}`,
        params: insert.params,
      },
    };
  },
};
