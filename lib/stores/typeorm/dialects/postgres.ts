import { OUTBOX_ERROR_HISTORY } from '../../../outbox.constants';
import { join, raw, sql, SqlText } from '../sql';
import { OutboxTableNames } from '../typeorm-outbox.tables';
import {
  ClaimCandidates,
  ClaimPlanRequest,
  DialectContext,
  driverError,
  EventInsert,
  InsertedEvent,
  Plan,
  QueryRunnerDialect,
  Row,
  RunOptions,
  SqlDialect,
} from './sql-dialect';

/** PostgreSQL 12+ (tested on 15): `timestamptz(3)`, `json` payloads, partial indexes. */
export function postgresDdl(t: OutboxTableNames): { create: string[]; drop: string[] } {
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
  const drop = [
    `DROP TABLE IF EXISTS ${D}`,
    `DROP TABLE IF EXISTS ${E}`,
    `DROP TABLE IF EXISTS ${t.version.text}`,
  ];
  return { create, drop };
}

export class PostgresDialect extends QueryRunnerDialect implements SqlDialect {
  readonly name = 'postgres';
  readonly tables: OutboxTableNames;
  readonly now = raw('now()');
  readonly nowMs = raw('(floor(extract(epoch from now()) * 1000))::bigint');
  readonly skipLocked = raw('FOR UPDATE SKIP LOCKED');
  readonly byId = raw('');
  readonly updateReturning = true;
  readonly maxStatementBytes = 256 * 1024 * 1024;
  // One statement claims; SKIP LOCKED keeps concurrent claimers from waiting on each other.
  readonly claimRunOptions: RunOptions = { transaction: false };

  constructor(ctx: DialectContext) {
    super(ctx);
    this.tables = ctx.tables;
  }

  protected compile(stmt: SqlText): { text: string; params: unknown[] } {
    let i = 0;
    return { text: stmt.text.replace(/\?/g, () => `$${++i}`), params: [...stmt.params] };
  }

  protected isDeadlock(error: unknown): boolean {
    const code = driverError(error).code;
    return code === '40P01' || code === '40001';
  }

  isUniqueViolation(error: unknown): boolean {
    return driverError(error).code === '23505';
  }

  plusMs(base: SqlText, ms: number): SqlText {
    return sql`(${base} + ${ms}::double precision * interval '1 millisecond')`;
  }

  time(value: Date): SqlText {
    return sql`${value}::timestamptz`;
  }

  timeOut(expr: SqlText): SqlText {
    return expr;
  }

  readTime(value: unknown): Date {
    return value instanceof Date ? value : new Date(value as string);
  }

  jsonOut(expr: SqlText): SqlText {
    return sql`${expr}::text`;
  }

  uuid(value: string): SqlText {
    return sql`${value}::uuid`;
  }

  appendError(
    column: SqlText,
    e: { name: string; message: string; attempt: number; workerId: string },
    keep = OUTBOX_ERROR_HISTORY,
  ): SqlText {
    return sql`(CASE WHEN jsonb_array_length(${column}) >= ${raw(String(keep))} THEN ${column} - 0 ELSE ${column} END) || jsonb_build_array(jsonb_build_object('name', ${e.name}::text, 'message', ${e.message}::text, 'attempt', ${e.attempt}::int, 'workerId', ${e.workerId}::text, 'at', ${this.nowMs}))`;
  }

  *insertEvents(events: EventInsert[]): Plan<Map<string, InsertedEvent>> {
    const values = events.map(
      (e) =>
        sql`(${e.id}, ${e.type}, ${e.key}, ${e.payload}, ${e.headers}, ${this.time(e.occurredAt)}, ${e.availableAt ? this.time(e.availableAt) : this.now})`,
    );
    const { rows } =
      yield sql`INSERT INTO ${this.tables.events} (id, type, event_key, payload, headers, occurred_at, available_at) VALUES ${join(values)} RETURNING id, seq, available_at`;
    return new Map(
      rows.map((r) => [
        String(r.id),
        { seq: Number(r.seq), availableAt: this.readTime(r.available_at) },
      ]),
    );
  }

  *claim(req: ClaimPlanRequest, candidates: ClaimCandidates, columns: SqlText): Plan<Row[]> {
    const { rows } =
      yield sql`WITH c AS MATERIALIZED (${candidates({ limit: req.limit, lock: true })})
UPDATE ${this.tables.deliveries} AS d
SET status = 'leased', attempts = d.attempts + 1, lease_owner = ${req.owner}, lease_token = ${req.token}, lease_until = ${this.plusMs(this.now, req.leaseMs)}
FROM c, ${this.tables.events} AS e
WHERE d.id = c.id AND e.seq = d.event_seq
RETURNING ${columns}`;
    return rows;
  }

  /**
   * Advisory lock key for a lock name. Advisory locks are per database already; without an
   * explicit schema the tables live in the session's current schema, so that is part of the key
   * (two applications with the same prefix in different schemas must not share a lock).
   */
  private lockKey(name: string): SqlText {
    const where = this.tables.schema
      ? sql`current_database()`
      : sql`current_database() || '.' || coalesce(current_schema(), '')`;
    return sql`hashtext(${where} || ':' || ${name}::text)`;
  }

  tryLock(name: string): SqlText {
    return sql`SELECT pg_try_advisory_xact_lock(${this.lockKey(name)}) AS ok`;
  }

  lock(name: string): SqlText {
    return sql`SELECT pg_advisory_xact_lock(${this.lockKey(name)}) IS NULL AS ok`;
  }

  unlock(): SqlText | null {
    return null;
  }

  createSchema(): string[] {
    return postgresDdl(this.tables).create;
  }

  dropSchema(): string[] {
    return postgresDdl(this.tables).drop;
  }
}
