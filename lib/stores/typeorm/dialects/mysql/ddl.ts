import { OutboxTableNames } from '../../schema/tables';

/**
 * The binary NO PAD collation of the server: names and keys then compare exactly as in
 * JavaScript. `utf8mb4_bin` is PAD SPACE on both servers (`'a' = 'a '`), which would merge keys
 * that differ only by trailing spaces (per-key order, dead-letter filters). MariaDB (10.2+) calls
 * it `utf8mb4_nopad_bin`, MySQL 8 `utf8mb4_0900_bin`; neither accepts the other's name.
 */
export function mysqlTextCollation(serverVersion: string): string {
  return /mariadb/i.test(serverVersion) ? 'utf8mb4_nopad_bin' : 'utf8mb4_0900_bin';
}

/**
 * MySQL 8.0.1+ and MariaDB 10.6+ (SKIP LOCKED). Times are `DATETIME(3)` holding UTC, written
 * and read as text so neither the session time zone nor the driver's `timezone` option can shift
 * them. Text is utf8mb4 with a binary NO PAD collation (`mysqlTextCollation`), so names compare
 * exactly as in JavaScript. Without a server to ask (the CLI), the MariaDB name is used.
 */
export function mysqlDdl(
  t: OutboxTableNames,
  collation = mysqlTextCollation('MariaDB'),
): {
  create: string[];
  drop: string[];
  upgrade: string[];
  record: (version: number) => string;
} {
  const E = t.events.text;
  const D = t.deliveries.text;
  const DL = t.deadLetters.text;
  const n = (s: string) => t.name(s).text;
  const table = `ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=${collation}`;
  // Restated per column: upgraded tables keep their old default collation.
  const text = (size: number, nullable: boolean) =>
    `VARCHAR(${size}) CHARACTER SET utf8mb4 COLLATE ${collation} ${nullable ? 'NULL' : 'NOT NULL'}`;
  const uuid = 'CHAR(36) CHARACTER SET ascii COLLATE ascii_bin';
  // Indexes are declared inline: MySQL has no CREATE INDEX IF NOT EXISTS.
  const create = [
    `CREATE TABLE IF NOT EXISTS ${E} (
  seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  id ${uuid} NOT NULL,
  type ${text(255, false)},
  event_key ${text(512, true)},
  payload LONGTEXT NOT NULL,
  headers MEDIUMTEXT NOT NULL,
  occurred_at DATETIME(3) NOT NULL,
  available_at DATETIME(3) NOT NULL,
  UNIQUE KEY ${n('events_id_uq')} (id),
  KEY ${n('events_available_idx')} (available_at)
) ${table}`,
    `CREATE TABLE IF NOT EXISTS ${D} (
  id ${uuid} NOT NULL PRIMARY KEY,
  event_seq BIGINT UNSIGNED NOT NULL,
  event_type ${text(255, false)},
  event_key ${text(512, true)},
  handler ${text(255, false)},
  status VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  attempts INT NOT NULL DEFAULT 0,
  available_at DATETIME(3) NOT NULL,
  lease_owner ${text(255, true)},
  lease_token VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  lease_until DATETIME(3) NULL,
  reason VARCHAR(16) NULL,
  errors LONGTEXT NOT NULL,
  done_at DATETIME(3) NULL,
  UNIQUE KEY ${n('deliveries_event_handler_uq')} (event_seq, handler),
  KEY ${n('deliveries_claim_idx')} (status, handler, event_seq, available_at, lease_until),
  KEY ${n('deliveries_key_idx')} (handler, event_key(400), status, event_seq)
) ${table}`,
    `CREATE TABLE IF NOT EXISTS ${DL} (
  id ${uuid} NOT NULL PRIMARY KEY,
  event_seq BIGINT UNSIGNED NOT NULL,
  event_type ${text(255, false)},
  event_key ${text(512, true)},
  handler ${text(255, false)},
  attempts INT NOT NULL,
  reason VARCHAR(16) NOT NULL,
  errors LONGTEXT NOT NULL,
  dead_at DATETIME(3) NOT NULL,
  KEY ${n('dead_letters_dead_idx')} (dead_at, id),
  KEY ${n('dead_letters_event_idx')} (event_seq)
) ${table}`,
    `CREATE TABLE IF NOT EXISTS ${t.version.text} (
  version INT NOT NULL,
  applied_at DATETIME(3) NULL
) ${table}`,
  ];
  const drop = [
    `DROP TABLE IF EXISTS ${D}`,
    `DROP TABLE IF EXISTS ${DL}`,
    `DROP TABLE IF EXISTS ${E}`,
    `DROP TABLE IF EXISTS ${t.version.text}`,
  ];
  // Version 1 kept delivered and dead rows in `deliveries`. MySQL has no `IF [NOT] EXISTS` for
  // indexes: the schema runner skips "duplicate key name" and "can't drop" answers.
  const upgrade = [
    `INSERT IGNORE INTO ${DL} (id, event_seq, event_type, event_key, handler, attempts, reason, errors, dead_at) SELECT id, event_seq, event_type, event_key, handler, attempts, COALESCE(reason, 'exhausted'), errors, COALESCE(done_at, UTC_TIMESTAMP(3)) FROM ${D} WHERE status = 'dead'`,
    `DELETE FROM ${D} WHERE status NOT IN ('pending', 'leased')`,
    `ALTER TABLE ${E} ADD KEY ${n('events_available_idx')} (available_at)`,
    `ALTER TABLE ${D} DROP KEY ${n('deliveries_done_idx')}`,
    // Version 3: the compared text moves to a NO PAD collation (idempotent).
    `ALTER TABLE ${E} MODIFY type ${text(255, false)}, MODIFY event_key ${text(512, true)}`,
    `ALTER TABLE ${D} MODIFY event_type ${text(255, false)}, MODIFY event_key ${text(512, true)}, MODIFY handler ${text(255, false)}, MODIFY lease_owner ${text(255, true)}`,
    `ALTER TABLE ${DL} MODIFY event_type ${text(255, false)}, MODIFY event_key ${text(512, true)}, MODIFY handler ${text(255, false)}`,
  ];
  // Records `version` unless tables at it (or later) are recorded: a migration may run it again.
  const record = (version: number) =>
    `INSERT INTO ${t.version.text} (version, applied_at) SELECT ${version}, UTC_TIMESTAMP(3) FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM ${t.version.text} WHERE version >= ${version})`;
  return { create, drop, upgrade, record };
}
