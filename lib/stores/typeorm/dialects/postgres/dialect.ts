import { postgresDdl } from './ddl';
import { createHash } from 'node:crypto';
import type { SqlConnection, SqlStatement } from '../../../../executors/sql-executor';
import { OUTBOX_ERROR_HISTORY } from '../../../../outbox.constants';
import { EMPTY, prepared, raw, sql, SqlText } from '../../sql';
import { OutboxTableNames } from '../../schema/tables';
import {
  ClaimCandidates,
  ClaimPlanRequest,
  DialectContext,
  driverError,
  AppendRow,
  InsertedEvent,
  LeaseRef,
  RowMove,
  Plan,
  QueryRunnerDialect,
  Row,
  RunOptions,
  SqlDialect,
  SchemaDdl,
} from '../sql-dialect';

export class PostgresDialect extends QueryRunnerDialect implements SqlDialect {
  readonly name = 'postgres';
  readonly tables: OutboxTableNames;
  /**
   * Truncated to the millisecond: the time columns are `TIMESTAMPTZ(3)`, which *round* a stored
   * value, so `now()` written as a due time could land up to 0.5 ms in the future and a claim in
   * that half millisecond would find nothing due (e.g. right after `retry(…, 0)`). Compared
   * truncated too, so "due" and "lease expired" agree with what was stored.
   */
  readonly now = raw("date_trunc('milliseconds', now())");
  readonly nowMs = raw('(floor(extract(epoch from now()) * 1000))::bigint');
  readonly skipLocked = raw('FOR UPDATE SKIP LOCKED');
  readonly latestRead = EMPTY;
  readonly byId = raw('');
  readonly claimPerHandler = true;
  readonly updateReturning = true;
  readonly maxStatementBytes = 256 * 1024 * 1024;
  // One statement claims; SKIP LOCKED keeps concurrent claimers from waiting on each other.
  readonly claimRunOptions: RunOptions = { transaction: false };

  constructor(ctx: DialectContext) {
    super(ctx);
    this.tables = ctx.tables;
  }

  /** Names of the statements prepared on connections, by text. */
  private readonly preparedNames = new Map<string, string>();

  /**
   * Hot statements (claim, ack, append) run as named prepared statements on the pooled `pg`
   * client: parsed and planned once per connection instead of on every call. The executor
   * carries the name (TypeORM: on the `pg` client under the query runner).
   */
  protected override statement(stmt: SqlText): SqlStatement {
    const compiled = this.compile(stmt);
    if (!stmt.prepare || !this.ctx.preparedStatements) return compiled;
    let name = this.preparedNames.get(compiled.text);
    if (!name) {
      name = `nestjs_outbox_${createHash('sha1').update(compiled.text).digest('hex').slice(0, 20)}`;
      this.preparedNames.set(compiled.text, name);
    }
    return { ...compiled, name };
  }

  /** Statement texts with `$n` placeholders, by their `?` form (the hot ones repeat). */
  private readonly compiled = new Map<string, string>();

  protected compile(stmt: SqlText): { text: string; params: unknown[] } {
    let text = this.compiled.get(stmt.text);
    if (text === undefined) {
      let i = 0;
      text = stmt.text.replace(/\?/g, () => `$${++i}`);
      if (stmt.prepare) {
        // Prepared texts are few (one per statement shape); the bound guards a caller that
        // makes new ones without end.
        if (this.compiled.size >= 1000) this.compiled.clear();
        this.compiled.set(stmt.text, text);
      }
    }
    return { text, params: [...stmt.params] };
  }

  protected isDeadlock(error: unknown): boolean {
    const code = driverError(error).code;
    return code === '40P01' || code === '40001';
  }

  lockTimeout(seconds: number): SqlText {
    return raw(`SET LOCAL lock_timeout = '${Math.floor(seconds)}s'`);
  }

  isLockTimeout(error: unknown): boolean {
    return driverError(error).code === '55P03';
  }

  isRedundantDdl(): boolean {
    return false;
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

  /**
   * Times come back as epoch milliseconds (`float8`, exact for `timestamptz(3)`): a number costs
   * `new Date(n)` to read, where `pg`'s text timestamp parsing was the largest single cost of
   * reading a claimed row (measured: 3 µs per row of three times).
   */
  timeOut(expr: SqlText): SqlText {
    return sql`(extract(epoch from ${expr}) * 1000)::float8`;
  }

  readTime(value: unknown): Date {
    // (Rounded: before PostgreSQL 14, extract() computes in double precision and a time past
    // 2038 can come back a hair under its millisecond.)
    if (typeof value === 'number') return new Date(Math.round(value));
    return value instanceof Date ? value : new Date(value as string);
  }

  jsonOut(expr: SqlText): SqlText {
    return sql`${expr}::text`;
  }

  anyOf(expr: SqlText, values: readonly unknown[], type: 'uuid' | 'bigint'): SqlText {
    return sql`${expr} = ANY(${[...values]}::${raw(type)}[])`;
  }

  uuid(value: string): SqlText {
    return sql`${value}::uuid`;
  }

  lastError(errors: SqlText): SqlText {
    return sql`(${errors} -> -1) ->> 'name' AS error_name, (${errors} -> -1) ->> 'message' AS error_message`;
  }

  appendError(
    column: SqlText,
    e: { name: string; message: string; attempt: number; workerId: string; stack?: string },
    keep = OUTBOX_ERROR_HISTORY,
  ): SqlText {
    return sql`(CASE WHEN jsonb_array_length(${column}) >= ${raw(String(keep))} THEN ${column} - 0 ELSE ${column} END) || jsonb_build_array(jsonb_build_object('name', ${e.name}::text, 'message', ${e.message}::text, 'attempt', ${e.attempt}::int, 'workerId', ${e.workerId}::text, 'at', ${this.nowMs}${e.stack === undefined ? EMPTY : sql`, 'stack', ${e.stack}::text`}))`;
  }

  /**
   * One statement for the whole batch, whatever its size: arrays instead of a VALUES list, so the
   * text is fixed (a single event, the usual append, has a statement of its own); existing ids
   * are skipped by `ON CONFLICT`, so a duplicate never aborts the caller's transaction and no
   * savepoint is needed.
   */
  *appendEvents(rows: AppendRow[]): Plan<Map<string, InsertedEvent>> {
    const { rows: inserted } = yield rows.length === 1
      ? this.appendOne(rows[0])
      : this.appendMany(rows);
    return new Map(
      inserted.map((r) => [
        String(r.id).toLowerCase(),
        { seq: Number(r.seq), availableAt: this.readTime(r.available_at) },
      ]),
    );
  }

  /**
   * The usual append, one event: scalar parameters (no arrays for the server to parse and
   * unnest, no ordering), its deliveries from two short arrays.
   */
  private appendOne(r: AppendRow): SqlText {
    const params = appendOneParams(r);
    // The text is the same for every event: built once, so the statement caches find it by the
    // same string (hashed once) and nothing is concatenated per append.
    this.appendOneText ??= this.appendOneStatement(params).text;
    return new SqlText(this.appendOneText, params, true);
  }

  private appendOneText: string | undefined;

  /** `appendOne`'s statement as the executor runs it (`$n` text, prepared name), built once. */
  private appendOneRun: { text: string; name?: string } | undefined;

  /**
   * `appendOne` sent straight to the connection: no plan, no per-call compile or cache lookups
   * (run 28 in bench/RESULTS.md). The id existing already returns no row: `null`.
   */
  async appendOneOn(connection: SqlConnection, r: AppendRow): Promise<InsertedEvent | null> {
    const params = appendOneParams(r);
    if (this.appendOneRun === undefined) {
      const { text, name } = this.statement(this.appendOne(r));
      this.appendOneRun = name === undefined ? { text } : { text, name };
    }
    const { text, name } = this.appendOneRun;
    const { rows } = await connection.query(
      name === undefined ? { text, params } : { text, params, name },
    );
    const row = rows[0];
    return row === undefined
      ? null
      : { seq: Number(row.seq), availableAt: this.readTime(row.available_at) };
  }

  private appendOneStatement([
    id,
    type,
    key,
    payload,
    headers,
    occurredAt,
    availableAt,
    ids,
    handlers,
  ]: unknown[]): SqlText {
    return prepared(sql`WITH ev AS (
  INSERT INTO ${this.tables.events} (id, type, event_key, payload, headers, occurred_at, available_at)
  VALUES (${id}::uuid, ${type}::text, ${key}::text, ${payload}::json, ${headers}::json, ${occurredAt}::timestamptz, COALESCE(${availableAt}::timestamptz, ${this.now}))
  ON CONFLICT (id) DO NOTHING
  RETURNING seq, id, type, event_key, available_at
), dl AS (
  INSERT INTO ${this.tables.deliveries} (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors)
  SELECT h.id, ev.seq, ev.type, ev.event_key, h.handler, 'pending', 0, ev.available_at, '[]'
  FROM ev CROSS JOIN unnest(${ids}::uuid[], ${handlers}::text[]) AS h(id, handler)
)
SELECT id, seq, ${this.timeOut(raw('available_at'))} AS available_at FROM ev`);
  }

  private appendMany(rows: AppendRow[]): SqlText {
    const deliveries = rows.flatMap((r) => r.deliveries.map((d) => ({ ...d, eventId: r.id })));
    return prepared(sql`WITH input AS (
  SELECT * FROM unnest(${rows.map((r) => r.id)}::uuid[], ${rows.map((r) => r.type)}::text[], ${rows.map((r) => r.key)}::text[], ${rows.map((r) => r.payload)}::text[], ${rows.map((r) => r.headers)}::text[], ${rows.map((r) => r.occurredAt.toISOString())}::timestamptz[], ${rows.map((r) => r.availableAt?.toISOString() ?? null)}::timestamptz[])
    WITH ORDINALITY AS i(id, type, event_key, payload, headers, occurred_at, available_at, n)
), ev AS (
  INSERT INTO ${this.tables.events} (id, type, event_key, payload, headers, occurred_at, available_at)
  SELECT id, type, event_key, payload::json, headers::json, occurred_at, COALESCE(available_at, ${this.now}) FROM input ORDER BY n
  ON CONFLICT (id) DO NOTHING
  RETURNING seq, id, type, event_key, available_at
), dl AS (
  INSERT INTO ${this.tables.deliveries} (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors)
  SELECT h.id, ev.seq, ev.type, ev.event_key, h.handler, 'pending', 0, ev.available_at, '[]'
  FROM ev JOIN unnest(${deliveries.map((d) => d.eventId)}::uuid[], ${deliveries.map((d) => d.id)}::uuid[], ${deliveries.map((d) => d.handler)}::text[]) AS h(event_id, id, handler) ON h.event_id = ev.id
)
SELECT id, seq, ${this.timeOut(raw('available_at'))} AS available_at FROM ev`);
  }

  readonly moveRunOptions: RunOptions = {};
  readonly deleteLeasedRunOptions: RunOptions = {};

  *moveRows(move: RowMove): Plan<Row[]> {
    const pick = move.limit
      ? sql`id IN (SELECT id FROM ${move.from} WHERE ${move.where} ORDER BY id LIMIT ${raw(String(Math.floor(move.limit)))} FOR UPDATE SKIP LOCKED)`
      : move.where;
    const { rows } =
      yield sql`WITH moved AS (DELETE FROM ${move.from} WHERE ${pick} RETURNING *) INSERT INTO ${move.to} (${raw(move.columns)}) SELECT ${move.values} FROM moved RETURNING id`;
    return rows;
  }

  /**
   * One statement of fixed text for any number of leases (arrays, not an OR list): the ids
   * (`$1`) and, at the same positions, each lease's fence (`$2`: the token's length, the token
   * and the owner in one string; the length keeps the split unambiguous whatever a token holds).
   * The rows are reached through the primary key (`id = ANY`), the only index this statement can
   * use (the status test is written so no partial index on status matches it). Each row is then
   * checked against the lease at its id's position, found by binary search (`width_bucket`: the
   * caller gives the ids in order, see `AckOp`: sorted as text, which is uuid order for the
   * store's own lowercase ids; ids in mixed case stay correct through the scan below) and
   * confirmed to hold the row's id, so a position off (ids out of order) never pairs a row with
   * another delivery's lease of the same claim (fences do not name the id). A row that fails that check is checked against every lease
   * given for its id (`array_positions`, a scan): a stale lease given before the live one, ids out
   * of order, or a lease lost. No join for the planner to choose: the semi-join on (id, fence)
   * this replaced ran as a hash join in a drain's statistics but as a nested loop comparing each
   * row with half the batch in others (bench/RESULTS.md, run 25: 12,720 comparisons for 160 acks,
   * 12.6 against 5.2 µs of server CPU per acknowledged delivery). (Written with `$1`, `$2`: each
   * array is sent and parsed once.)
   */
  *deleteLeased(leases: readonly LeaseRef[]): Plan<Row[]> {
    this.deleteLeasedText ??= prepared(sql`DELETE FROM ${this.tables.deliveries} AS d
WHERE d.id = ANY($1::uuid[]) AND d.status || '' = 'leased' AND d.lease_until > ${this.now}
  AND ((${LEASE_FENCE} = ($2::text[])[width_bucket(d.id, $1::uuid[])] AND ($1::uuid[])[width_bucket(d.id, $1::uuid[])] = d.id)
    OR EXISTS (SELECT 1 FROM unnest(array_positions($1::uuid[], d.id)) AS i(n) WHERE ($2::text[])[i.n] = ${LEASE_FENCE}))
RETURNING d.id`).text;
    const { rows } = yield new SqlText(
      this.deleteLeasedText,
      [leases.map((l) => l.deliveryId), leases.map(fence)],
      true,
    );
    return rows;
  }

  private deleteLeasedText: string | undefined;

  /**
   * One statement. The picked ids and their events are reached by `= ANY(ARRAY(…))`, which is
   * always an index lookup: joined as tables, the planner may hash-join them against a sequential
   * scan of the whole backlog (measured: 7.5 of 8.9 ms per claim of 100 over 20,000 open rows).
   */
  *claim(req: ClaimPlanRequest, candidates: ClaimCandidates, columns: SqlText): Plan<Row[]> {
    const stmt = sql`WITH c AS MATERIALIZED (${candidates({ limit: req.limit, lock: true, handlerLimits: req.handlerLimits })}),
u AS (
  UPDATE ${this.tables.deliveries} AS d
  SET status = 'leased', attempts = d.attempts + 1, lease_owner = ${req.owner}, lease_token = ${req.token}, lease_until = ${this.plusMs(this.now, req.leaseMs)}
  WHERE d.id = ANY(ARRAY(SELECT id FROM c))
  RETURNING d.*
)
SELECT ${columns}
FROM u AS d
JOIN (SELECT * FROM ${this.tables.events} WHERE seq = ANY(ARRAY(SELECT event_seq FROM u))) AS e ON e.seq = d.event_seq`;
    // The text is the same on every claim with these `candidates` and `columns` (a worker's, see
    // `ClaimCandidates`); only the parameters change. Built afresh it is a new string of a few
    // KB, which the statement caches hash and compare on every claim (~10 µs of a claim's Node
    // time, bench/RESULTS.md run 16): the first one is kept and reused while the length matches.
    let text = this.claimTexts.get(candidates);
    if (text?.columns !== columns || text.text.length !== stmt.text.length) {
      text = { columns, text: stmt.text };
      this.claimTexts.set(candidates, text);
    }
    const { rows } = yield prepared(new SqlText(text.text, stmt.params));
    return rows;
  }

  /** The text of the claim statement by its `candidates` (see `claim`). */
  private readonly claimTexts = new WeakMap<ClaimCandidates, { columns: SqlText; text: string }>();

  /**
   * Advisory lock key for a lock name. Advisory locks are per database already; the schema the
   * tables live in is part of the key (two applications with the same prefix in different schemas
   * must not share a lock), and it is the effective one — the configured schema, else the
   * session's `current_schema()` — so a process configured with `schema: 'public'` and one with
   * none take turns on the same tables.
   */
  private lockKey(name: string): SqlText {
    const schema = this.tables.schema;
    const where = schema
      ? sql`current_database() || '.' || ${schema}::text`
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

  protected ddl(): SchemaDdl {
    return postgresDdl(this.tables);
  }
}

/** A row's lease as `deleteLeased` compares it with a lease's `fence`. */
const LEASE_FENCE = raw(`length(d.lease_token) || ':' || d.lease_token || d.lease_owner`);

/** The string `deleteLeased` compares with a row's lease token and owner. */
function fence(lease: LeaseRef): string {
  return `${lease.token.length}:${lease.token}${lease.owner}`;
}

/** The values of `appendOne`'s statement, in its parameters' order. */
function appendOneParams(r: AppendRow): unknown[] {
  const ids: string[] = new Array(r.deliveries.length);
  const handlers: string[] = new Array(r.deliveries.length);
  for (let i = 0; i < r.deliveries.length; i++) {
    ids[i] = r.deliveries[i].id;
    handlers[i] = r.deliveries[i].handler;
  }
  return [
    r.id,
    r.type,
    r.key,
    r.payload,
    r.headers,
    r.occurredAt.toISOString(),
    r.availableAt?.toISOString() ?? null,
    ids,
    handlers,
  ];
}
