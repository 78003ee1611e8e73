import { OutboxTableNames } from '../../schema/tables';

/** SQLite 3.42+ through better-sqlite3. Times are epoch milliseconds (INTEGER). */
export function sqliteDdl(t: OutboxTableNames): {
  create: string[];
  drop: string[];
  upgrade: string[];
  record: (version: number) => string;
} {
  const E = t.events.text;
  const D = t.deliveries.text;
  const DL = t.deadLetters.text;
  const n = (s: string) => t.name(s).text;
  const create = [
    // AUTOINCREMENT: a sequence number is never reused after cleanup deletes the newest rows.
    `CREATE TABLE IF NOT EXISTS ${E} (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  type TEXT NOT NULL,
  event_key TEXT,
  payload TEXT NOT NULL,
  headers TEXT NOT NULL,
  occurred_at INTEGER NOT NULL,
  available_at INTEGER NOT NULL
)`,
    `CREATE TABLE IF NOT EXISTS ${D} (
  id TEXT PRIMARY KEY,
  event_seq INTEGER NOT NULL,
  event_type TEXT NOT NULL,
  event_key TEXT,
  handler TEXT NOT NULL,
  status TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  available_at INTEGER NOT NULL,
  lease_owner TEXT,
  lease_token TEXT,
  lease_until INTEGER,
  reason TEXT,
  errors TEXT NOT NULL DEFAULT '[]',
  done_at INTEGER,
  UNIQUE (event_seq, handler)
)`,
    `CREATE INDEX IF NOT EXISTS ${n('deliveries_claim_idx')} ON ${D} (handler, event_seq, status, available_at, lease_until, event_key, id) WHERE status IN ('pending', 'leased')`,
    `CREATE INDEX IF NOT EXISTS ${n('deliveries_key_idx')} ON ${D} (handler, event_key, event_seq) WHERE status IN ('pending', 'leased') AND event_key IS NOT NULL`,
    `CREATE TABLE IF NOT EXISTS ${DL} (
  id TEXT PRIMARY KEY,
  event_seq INTEGER NOT NULL,
  event_type TEXT NOT NULL,
  event_key TEXT,
  handler TEXT NOT NULL,
  attempts INTEGER NOT NULL,
  reason TEXT NOT NULL,
  errors TEXT NOT NULL DEFAULT '[]',
  dead_at INTEGER NOT NULL
)`,
    `CREATE INDEX IF NOT EXISTS ${n('dead_letters_dead_idx')} ON ${DL} (dead_at, id)`,
    `CREATE INDEX IF NOT EXISTS ${n('dead_letters_event_idx')} ON ${DL} (event_seq)`,
    `CREATE INDEX IF NOT EXISTS ${n('events_available_idx')} ON ${E} (available_at)`,
    `CREATE TABLE IF NOT EXISTS ${t.version.text} (version INTEGER NOT NULL, applied_at INTEGER)`,
  ];
  const drop = [
    `DROP TABLE IF EXISTS ${D}`,
    `DROP TABLE IF EXISTS ${DL}`,
    `DROP TABLE IF EXISTS ${E}`,
    `DROP TABLE IF EXISTS ${t.version.text}`,
  ];
  // Version 1 kept delivered and dead rows in `deliveries`.
  const upgrade = [
    `INSERT OR IGNORE INTO ${DL} (id, event_seq, event_type, event_key, handler, attempts, reason, errors, dead_at) SELECT id, event_seq, event_type, event_key, handler, attempts, COALESCE(reason, 'exhausted'), errors, COALESCE(done_at, CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)) FROM ${D} WHERE status = 'dead'`,
    `DELETE FROM ${D} WHERE status NOT IN ('pending', 'leased')`,
    `DROP INDEX IF EXISTS ${n('deliveries_done_idx')}`,
  ];
  // Records `version` unless tables at it (or later) are recorded: a migration may run it again.
  const record = (version: number) =>
    `INSERT INTO ${t.version.text} (version, applied_at) SELECT ${version}, CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER) WHERE NOT EXISTS (SELECT 1 FROM ${t.version.text} WHERE version >= ${version})`;
  return { create, drop, upgrade, record };
}
