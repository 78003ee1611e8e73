import { OutboxTableNames } from '../../schema/tables';

/**
 * PostgreSQL 12+ (tested on 15): `timestamptz(3)`, `json` payloads, partial indexes.
 * `deliveries` holds open work only (acknowledged rows are deleted, dead letters moved to
 * `dead_letters`), so the claim's cost does not grow with retained history.
 */
export function postgresDdl(t: OutboxTableNames): {
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
    `CREATE INDEX IF NOT EXISTS ${n('deliveries_claim_idx')} ON ${D} (handler, event_seq) INCLUDE (id, status, available_at, lease_until, event_key) WHERE status IN ('pending', 'leased')`,
    `CREATE INDEX IF NOT EXISTS ${n('deliveries_key_idx')} ON ${D} (handler, event_key, event_seq) WHERE status IN ('pending', 'leased') AND event_key IS NOT NULL`,
    `CREATE TABLE IF NOT EXISTS ${DL} (
  id UUID PRIMARY KEY,
  event_seq BIGINT NOT NULL,
  event_type VARCHAR(255) NOT NULL,
  event_key VARCHAR(512),
  handler VARCHAR(255) NOT NULL,
  attempts INTEGER NOT NULL,
  reason VARCHAR(16) NOT NULL,
  errors JSONB NOT NULL DEFAULT '[]',
  dead_at TIMESTAMPTZ(3) NOT NULL
)`,
    `CREATE INDEX IF NOT EXISTS ${n('dead_letters_dead_idx')} ON ${DL} (dead_at, id)`,
    `CREATE INDEX IF NOT EXISTS ${n('dead_letters_event_idx')} ON ${DL} (event_seq)`,
    // Retention walks events by due time, reading only those old enough to go.
    `CREATE INDEX IF NOT EXISTS ${n('events_available_idx')} ON ${E} (available_at)`,
    `CREATE TABLE IF NOT EXISTS ${t.version.text} (
  version INTEGER NOT NULL,
  applied_at TIMESTAMPTZ(3) NOT NULL DEFAULT now()
)`,
  ];
  const drop = [
    `DROP TABLE IF EXISTS ${D}`,
    `DROP TABLE IF EXISTS ${DL}`,
    `DROP TABLE IF EXISTS ${E}`,
    `DROP TABLE IF EXISTS ${t.version.text}`,
  ];
  // Version 1 kept delivered and dead rows in `deliveries`.
  const upgrade = [
    `INSERT INTO ${DL} (id, event_seq, event_type, event_key, handler, attempts, reason, errors, dead_at) SELECT id, event_seq, event_type, event_key, handler, attempts, COALESCE(reason, 'exhausted'), errors, COALESCE(done_at, now()) FROM ${D} WHERE status = 'dead' ON CONFLICT (id) DO NOTHING`,
    `DELETE FROM ${D} WHERE status NOT IN ('pending', 'leased')`,
    `DROP INDEX IF EXISTS ${t.schema ? `"${t.schema}".` : ''}${n('deliveries_done_idx')}`,
  ];
  // Records `version` unless tables at it (or later) are recorded: a migration may run it again.
  const record = (version: number) =>
    `INSERT INTO ${t.version.text} (version, applied_at) SELECT ${version}, now() WHERE NOT EXISTS (SELECT 1 FROM ${t.version.text} WHERE version >= ${version})`;
  return { create, drop, upgrade, record };
}
