import { OutboxTableNames } from '../../../lib/stores/typeorm/schema/tables';

/**
 * The DDL of schema version 1 as release 0.1.0 created it (delivered and dead rows kept in
 * `deliveries`), frozen here so the upgrade to the current version is tested from the real thing.
 */
export function schemaV1(dialect: 'postgres' | 'mysql' | 'sqlite', t: OutboxTableNames): string[] {
  if (dialect === 'postgres') return postgresV1(t);
  if (dialect === 'mysql') return mysqlV1(t);
  return sqliteV1(t);
}

function postgresV1(t: OutboxTableNames): string[] {
  const E = t.events.text;
  const D = t.deliveries.text;
  const n = (s: string) => t.name(s).text;
  const create = [
    ...(t.schema ? [`CREATE SCHEMA IF NOT EXISTS "${t.schema}"`] : []),
    `CREATE TABLE IF NOT EXISTS ${E} (
  seq BIGSERIAL PRIMARY KEY,
  id UUID NOT NULL,
  type VARCHAR(255) NOT NULL,
  event_key VARCHAR(512),
  payload JSON NOT NULL,
  headers JSON NOT NULL,
  occurred_at TIMESTAMPTZ(3) NOT NULL,
  available_at TIMESTAMPTZ(3) NOT NULL,
  created_at TIMESTAMPTZ(3) NOT NULL DEFAULT now(),
  CONSTRAINT ${n('events_id_uq')} UNIQUE (id)
)`,
    `CREATE TABLE IF NOT EXISTS ${D} (
  id UUID PRIMARY KEY,
  event_seq BIGINT NOT NULL,
  event_type VARCHAR(255) NOT NULL,
  event_key VARCHAR(512),
  handler VARCHAR(255) NOT NULL,
  status VARCHAR(16) NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  available_at TIMESTAMPTZ(3) NOT NULL,
  lease_owner VARCHAR(255),
  lease_token VARCHAR(64),
  lease_until TIMESTAMPTZ(3),
  reason VARCHAR(16),
  errors JSONB NOT NULL DEFAULT '[]',
  done_at TIMESTAMPTZ(3),
  CONSTRAINT ${n('deliveries_event_handler_uq')} UNIQUE (event_seq, handler)
)`,
    // The claim reads only this index: the pending/leased set stays small however many
    // delivered rows wait for cleanup.
    `CREATE INDEX IF NOT EXISTS ${n('deliveries_claim_idx')} ON ${D} (handler, event_seq) INCLUDE (id, status, available_at, lease_until, event_key) WHERE status IN ('pending', 'leased')`,
    `CREATE INDEX IF NOT EXISTS ${n('deliveries_key_idx')} ON ${D} (handler, event_key, event_seq) WHERE status IN ('pending', 'leased') AND event_key IS NOT NULL`,
    `CREATE INDEX IF NOT EXISTS ${n('deliveries_done_idx')} ON ${D} (status, done_at, id) WHERE status IN ('delivered', 'dead')`,
    `CREATE TABLE IF NOT EXISTS ${t.version.text} (
  version INTEGER NOT NULL,
  applied_at TIMESTAMPTZ(3) NOT NULL DEFAULT now()
)`,
  ];
  return create;
}

function mysqlV1(t: OutboxTableNames): string[] {
  const E = t.events.text;
  const D = t.deliveries.text;
  const n = (s: string) => t.name(s).text;
  const table = 'ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin';
  const uuid = 'CHAR(36) CHARACTER SET ascii COLLATE ascii_bin';
  // Indexes are declared inline: MySQL has no CREATE INDEX IF NOT EXISTS.
  const create = [
    `CREATE TABLE IF NOT EXISTS ${E} (
  seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  id ${uuid} NOT NULL,
  type VARCHAR(255) NOT NULL,
  event_key VARCHAR(512) NULL,
  payload LONGTEXT NOT NULL,
  headers MEDIUMTEXT NOT NULL,
  occurred_at DATETIME(3) NOT NULL,
  available_at DATETIME(3) NOT NULL,
  UNIQUE KEY ${n('events_id_uq')} (id)
) ${table}`,
    `CREATE TABLE IF NOT EXISTS ${D} (
  id ${uuid} NOT NULL PRIMARY KEY,
  event_seq BIGINT UNSIGNED NOT NULL,
  event_type VARCHAR(255) NOT NULL,
  event_key VARCHAR(512) NULL,
  handler VARCHAR(255) NOT NULL,
  status VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  attempts INT NOT NULL DEFAULT 0,
  available_at DATETIME(3) NOT NULL,
  lease_owner VARCHAR(255) NULL,
  lease_token VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  lease_until DATETIME(3) NULL,
  reason VARCHAR(16) NULL,
  errors LONGTEXT NOT NULL,
  done_at DATETIME(3) NULL,
  UNIQUE KEY ${n('deliveries_event_handler_uq')} (event_seq, handler),
  KEY ${n('deliveries_claim_idx')} (status, handler, event_seq, available_at, lease_until),
  KEY ${n('deliveries_key_idx')} (handler, event_key(400), status, event_seq),
  KEY ${n('deliveries_done_idx')} (status, done_at, id)
) ${table}`,
    `CREATE TABLE IF NOT EXISTS ${t.version.text} (
  version INT NOT NULL,
  applied_at DATETIME(3) NULL
) ${table}`,
  ];
  return create;
}

function sqliteV1(t: OutboxTableNames): string[] {
  const E = t.events.text;
  const D = t.deliveries.text;
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
    `CREATE INDEX IF NOT EXISTS ${n('deliveries_done_idx')} ON ${D} (status, done_at, id) WHERE status IN ('delivered', 'dead')`,
    `CREATE TABLE IF NOT EXISTS ${t.version.text} (version INTEGER NOT NULL, applied_at INTEGER)`,
  ];
  return create;
}
