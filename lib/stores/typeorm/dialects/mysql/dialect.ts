import type { SqlConnection } from '../../../../executors/sql-executor';
import { mysqlDdl, mysqlTextCollation } from './ddl';
import { OUTBOX_ERROR_HISTORY } from '../../../../outbox.constants';
import { EMPTY, join, list, raw, sql, SqlText } from '../../sql';
import { OutboxTableNames } from '../../schema/tables';
import {
  ClaimCandidates,
  ClaimPlanRequest,
  DialectContext,
  driverError,
  AppendRow,
  InsertedEvent,
  inList,
  insertDeliveries,
  LeaseRef,
  leasePairs,
  moveByIds,
  RowMove,
  Plan,
  QueryRunnerDialect,
  Row,
  RunOptions,
  SqlDialect,
  SchemaDdl,
  StatementResult,
} from '../sql-dialect';

const LOCK_TAG = 'nestjs-outbox:';

/** Candidates read per claim, as a multiple of the limit, for concurrent claimers to share. */
const CLAIM_WINDOW = 4;
/**
 * MariaDB's one-statement claim reads a smaller window while no other claimer gets in its way:
 * the multiple of the limit falls by this much per claim that got every row it asked for, down
 * to 1 (plus the ids this process's own claims are locking), and is back at `CLAIM_WINDOW` after
 * a claim statement that got fewer rows than ids it was given (another claimer took or holds them).
 */
const CLAIM_WINDOW_DECAY = 0.25;

/** The columns MariaDB's claim copies onto the rows it leases (every NOT NULL one without default). */
const CLAIM_COPY =
  'id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors';
/**
 * What the claim's SELECT gives for them: the locked rows exist, so every one ends in `ON
 * DUPLICATE KEY UPDATE` and these values are never written. `errors` (LONGTEXT) is given as a
 * constant: read from the row, it made MariaDB build the statement's temporary table on disk
 * (measured: ~1.3 on-disk temporary tables per claim, none with the constant).
 */
const CLAIM_COPY_VALUES = CLAIM_COPY.replace(/(\w+)/g, 'c.$1').replace('c.errors', "'[]'");

/**
 * Two statements for one connection, queued on it together: the second is sent the moment the
 * first one's answer arrives, not after that answer has made its way back through the event
 * loop, the promise chain and the plan. Its result is the second's.
 */
class BackToBack extends SqlText {
  constructor(
    readonly first: SqlText,
    readonly second: SqlText,
  ) {
    super(second.text, second.params);
  }
}

/**
 * What `claimRunOptions` and `deleteLeasedRunOptions` give before the server is known: `run`
 * replaces them with the server's own once it has asked (see `resolveFlavor`).
 */
const UNRESOLVED_CLAIM: RunOptions = Object.freeze({});
const UNRESOLVED_DELETE: RunOptions = Object.freeze({});

/** `2026-01-02 03:04:05.678` in UTC, the literal form of a `DATETIME(3)`. */
function utcLiteral(value: Date): string {
  return value.toISOString().replace('T', ' ').replace('Z', '');
}

export class MysqlDialect extends QueryRunnerDialect implements SqlDialect {
  readonly name = 'mysql';
  readonly tables: OutboxTableNames;
  readonly now = raw('UTC_TIMESTAMP(3)');
  readonly nowMs = raw(
    "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(3)) DIV 1000)",
  );
  readonly skipLocked = raw('FOR UPDATE SKIP LOCKED');
  readonly latestRead = raw('LOCK IN SHARE MODE');
  readonly byId = raw('FORCE INDEX (PRIMARY)');
  readonly updateReturning = false;
  // Stay well below the default max_allowed_packet (16 MiB on MariaDB, 64 MiB on MySQL 8).
  readonly maxStatementBytes = 4 * 1024 * 1024;

  /**
   * MariaDB has `INSERT/DELETE … RETURNING`; MySQL does not. Set once by `resolveFlavor`, before
   * the first statement, and never changed after: a claim's run options and its plan must agree.
   */
  private mariadb = false;
  private flavorKnown = false;
  private flavorAsked: Promise<void> | undefined;
  /** Text collation of the DDL; `inspectServer` sets the server's own. */
  private collation = mysqlTextCollation('MariaDB');

  constructor(ctx: DialectContext) {
    super(ctx);
    this.tables = ctx.tables;
  }

  /**
   * Asks the executor which server it talks to (`serverFlavor`), once; an executor that cannot
   * tell gets MySQL's statements, which MariaDB runs too. A failed question is asked again next
   * time.
   */
  private resolveFlavor(): Promise<void> {
    this.flavorAsked ??= (async () => {
      try {
        this.mariadb = (await this.ctx.executor.serverFlavor?.()) === 'mariadb';
        this.flavorKnown = true;
      } finally {
        this.flavorAsked = undefined;
      }
    })();
    return this.flavorAsked;
  }

  override async run<T>(plan: () => Plan<T>, options: RunOptions = {}): Promise<T> {
    if (!this.flavorKnown) {
      await this.resolveFlavor();
      if (options === UNRESOLVED_CLAIM) options = this.claimRunOptions;
      if (options === UNRESOLVED_DELETE) options = this.deleteLeasedRunOptions;
    }
    return super.run(plan, options);
  }

  override async runOn<T>(connection: SqlConnection, plan: () => Plan<T>): Promise<T> {
    if (!this.flavorKnown) await this.resolveFlavor();
    return super.runOn(connection, plan);
  }

  /**
   * MariaDB claims without a transaction (a window read, then one READ COMMITTED statement, see
   * `claim`), unless the server logs statements
   * (`binlog_format = STATEMENT`): a replica replaying `INSERT … SELECT … LIMIT … SKIP LOCKED`
   * could pick other rows, so there it claims like MySQL. `undefined` until the first claim asks.
   * Tests set it to `false` to run the transaction path on MariaDB.
   */
  oneStatementClaim: boolean | undefined = undefined;

  /**
   * MySQL (and MariaDB logging statements) claims in a short READ COMMITTED transaction, which
   * takes no next-key (gap) locks, the usual source of claim deadlocks; the few that remain are
   * retried.
   */
  get claimRunOptions(): RunOptions {
    if (!this.flavorKnown) return UNRESOLVED_CLAIM;
    return this.mariadb && this.oneStatementClaim !== false
      ? { deadlockRetries: 5 }
      : { transaction: true, isolation: 'READ COMMITTED', deadlockRetries: 5 };
  }

  protected compile(stmt: SqlText): { text: string; params: unknown[] } {
    // mysql2 reads `??` as an identifier placeholder; shared SQL must never produce it.
    if (stmt.text.includes('??'))
      throw new Error(`nestjs-outbox: ambiguous placeholder in ${stmt.text}`);
    return { text: stmt.text, params: [...stmt.params] };
  }

  /**
   * `BackToBack` statements go to the executor's connection together (`queryBackToBack`), both
   * queued before either answer comes back. A connection without that hook runs them one after
   * the other (same order, one more wait), the second only when the first succeeded.
   */
  protected override exec(connection: SqlConnection, stmt: SqlText): Promise<StatementResult> {
    if (!(stmt instanceof BackToBack)) return super.exec(connection, stmt);
    const first = this.statement(stmt.first);
    const second = this.statement(stmt.second);
    if (connection.queryBackToBack) return connection.queryBackToBack(first, second);
    return connection.query(first).then(() => connection.query(second));
  }

  protected isDeadlock(error: unknown): boolean {
    const e = driverError(error);
    return (
      e.errno === 1213 ||
      e.errno === 1205 ||
      e.code === 'ER_LOCK_DEADLOCK' ||
      e.code === 'ER_LOCK_WAIT_TIMEOUT'
    );
  }

  lockTimeout(): null {
    return null;
  }

  isLockTimeout(): boolean {
    return false;
  }

  isRedundantDdl(error: unknown): boolean {
    const e = driverError(error);
    // ER_DUP_KEYNAME, ER_CANT_DROP_FIELD_OR_KEY
    return e.errno === 1061 || e.errno === 1091;
  }

  isUniqueViolation(error: unknown): boolean {
    const e = driverError(error);
    return e.errno === 1062 || e.code === 'ER_DUP_ENTRY';
  }

  plusMs(base: SqlText, ms: number): SqlText {
    return sql`TIMESTAMPADD(MICROSECOND, ${Math.round(ms) * 1000}, ${base})`;
  }

  time(value: Date): SqlText {
    return sql`${utcLiteral(value)}`;
  }

  timeOut(expr: SqlText): SqlText {
    return sql`DATE_FORMAT(${expr}, '%Y-%m-%dT%H:%i:%s.%fZ')`;
  }

  readTime(value: unknown): Date {
    return value instanceof Date ? value : new Date(String(value));
  }

  jsonOut(expr: SqlText): SqlText {
    return expr;
  }

  anyOf(expr: SqlText, values: readonly unknown[]): SqlText {
    return inList(expr, values);
  }

  uuid(value: string): SqlText {
    return sql`${value}`;
  }

  lastError(errors: SqlText): SqlText {
    // No `$[last]` before MariaDB 10.9: the path is built from the length (none when empty).
    const field = (name: string) =>
      sql`CASE WHEN JSON_LENGTH(${errors}) > 0 THEN JSON_UNQUOTE(JSON_EXTRACT(${errors}, CONCAT('$[', JSON_LENGTH(${errors}) - 1, '].${raw(name)}'))) END`;
    return sql`${field('name')} AS error_name, ${field('message')} AS error_message`;
  }

  appendError(
    column: SqlText,
    e: { name: string; message: string; attempt: number; workerId: string; stack?: string },
    keep = OUTBOX_ERROR_HISTORY,
  ): SqlText {
    return sql`JSON_ARRAY_APPEND(IF(JSON_LENGTH(${column}) >= ${raw(String(keep))}, JSON_REMOVE(${column}, '$[0]'), ${column}), '$', JSON_OBJECT('name', ${e.name}, 'message', ${e.message}, 'attempt', ${e.attempt}, 'workerId', ${e.workerId}, 'at', ${this.nowMs}${e.stack === undefined ? EMPTY : sql`, 'stack', ${e.stack}`}))`;
  }

  *appendEvents(rows: AppendRow[]): Plan<Map<string, InsertedEvent>> {
    const values = rows.map(
      (e) =>
        sql`(${e.id}, ${e.type}, ${e.key}, ${e.payload}, ${e.headers}, ${this.time(e.occurredAt)}, ${e.availableAt ? this.time(e.availableAt) : this.now})`,
    );
    // A duplicate id fails this first statement, which InnoDB undoes alone (the transaction
    // stays usable). MariaDB returns the new rows; MySQL has no RETURNING and AUTO_INCREMENT
    // values of one statement need not be consecutive, so it reads them back.
    const insert = sql`INSERT INTO ${this.tables.events} (id, type, event_key, payload, headers, occurred_at, available_at) VALUES ${join(values)}`;
    const columns = sql`id, seq, ${this.timeOut(raw('available_at'))} AS available_at`;
    let inserted: Row[];
    if (this.mariadb) {
      inserted = (yield sql`${insert} RETURNING ${columns}`).rows;
    } else {
      yield insert;
      inserted =
        (yield sql`SELECT ${columns} FROM ${this.tables.events} WHERE id IN (${list(rows.map((e) => e.id))})`)
          .rows;
    }
    const byId = new Map(
      inserted.map((r) => [
        String(r.id).toLowerCase(),
        { seq: Number(r.seq), availableAt: this.readTime(r.available_at) },
      ]),
    );
    yield* insertDeliveries(this, rows, byId);
    return byId;
  }

  // READ COMMITTED: the locking reads take no gap locks for ids that are gone.
  readonly moveRunOptions: RunOptions = {
    transaction: true,
    isolation: 'READ COMMITTED',
    deadlockRetries: 3,
  };

  /** Acks meet claims locking the same rows in another order: a deadlock victim tries again. */
  get deleteLeasedRunOptions(): RunOptions {
    if (!this.flavorKnown) return UNRESOLVED_DELETE;
    return this.mariadb ? { deadlockRetries: 5 } : this.moveRunOptions;
  }

  moveRows(move: RowMove): Plan<Row[]> {
    return moveByIds(move, raw('FOR UPDATE'));
  }

  /**
   * MariaDB: one `DELETE … RETURNING`. MySQL has no RETURNING: it locks the owned-and-live rows
   * first (by primary key) and deletes exactly those; nobody can claim a locked row, so its lease
   * is still ours when the DELETE runs.
   */
  *deleteLeased(leases: readonly LeaseRef[]): Plan<Row[]> {
    const D = this.tables.deliveries;
    const ids = list(leases.map((l) => l.deliveryId));
    if (this.mariadb) {
      return (yield sql`DELETE FROM ${D} WHERE id IN (${ids}) AND status = 'leased' AND lease_until > ${this.now} AND (${MysqlDialect.leasesByOwner(leases)}) RETURNING id`)
        .rows;
    }
    const where = sql`id IN (${ids}) AND status = 'leased' AND lease_until > ${this.now} AND (${leasePairs(leases)})`;
    const { rows } = yield sql`SELECT id FROM ${D} ${this.byId} WHERE ${where} FOR UPDATE`;
    if (rows.length > 0) yield sql`DELETE FROM ${D} WHERE id IN (${list(rows.map((r) => r.id))})`;
    return rows;
  }

  /**
   * The fence of `deleteLeased` on MariaDB, grouped by lease: `(lease_owner = ? AND lease_token = ?
   * AND id IN (…)) OR …`, one group per (owner, token). The same rows as `leasePairs` (a row
   * matches when one of the given leases names its id, owner and token), with a third of the
   * parameters for a batch from one claim, which is what the dispatcher acknowledges together.
   */
  private static leasesByOwner(leases: readonly LeaseRef[]): SqlText {
    const groups = new Map<string, { owner: string; token: string; ids: string[] }>();
    for (const l of leases) {
      const k = `${l.owner.length}:${l.owner}${l.token}`;
      const group = groups.get(k);
      if (group) group.ids.push(l.deliveryId);
      else groups.set(k, { owner: l.owner, token: l.token, ids: [l.deliveryId] });
    }
    return join(
      [...groups.values()].map(
        (g) =>
          sql`(lease_owner = ${g.owner} AND lease_token = ${g.token} AND id IN (${list(g.ids)}))`,
      ),
      ' OR ',
    );
  }

  /**
   * Ids that claims of this dialect instance are locking right now (in a claim statement), and
   * ids they leased recently, each with the number of the claim statement that leased it
   * (`claimsDone` then). A claim leaves both out of its window: its window read may have run
   * before they were leased, and MariaDB would lock them (or skip them, locked) only to find them
   * taken. Only a preference: every condition is checked again on the locked rows.
   */
  private readonly claiming = new Set<unknown>();
  private readonly leasedRecently: Array<{ done: number; ids: unknown[] }> = [];
  private claimsDone = 0;
  /** `claimsDone` when each running claim read its window. */
  private readonly claimsSince: number[] = [];
  /** The window's multiple of the limit on MariaDB (see `CLAIM_WINDOW_DECAY`). */
  private windowFactor = CLAIM_WINDOW;

  /** The limits of the claims of this dialect instance running now, summed. */
  private runningLimits = 0;

  *claim(req: ClaimPlanRequest, candidates: ClaimCandidates, columns: SqlText): Plan<Row[]> {
    const since = this.claimsDone;
    this.claimsSince.push(since);
    this.runningLimits += req.limit;
    try {
      return yield* this.claimAs(since, req, candidates, columns);
    } finally {
      this.runningLimits -= req.limit;
      this.claimsSince.splice(this.claimsSince.indexOf(since), 1);
      // Leases older than every running claim's window read are not in any window.
      const oldest = this.claimsSince.length > 0 ? Math.min(...this.claimsSince) : this.claimsDone;
      while (this.leasedRecently.length > 0 && this.leasedRecently[0].done <= oldest) {
        this.leasedRecently.shift();
      }
    }
  }

  /** Whether an id of a window read when `claimsDone` was `since` is taken by this instance. */
  private takenSince(since: number): (id: unknown) => boolean {
    const recent = this.leasedRecently.filter((l) => l.done > since);
    if (recent.length === 0) return (id) => this.claiming.has(id);
    const leased = new Set(recent.flatMap((l) => l.ids));
    return (id) => this.claiming.has(id) || leased.has(id);
  }

  private *claimAs(
    since: number,
    req: ClaimPlanRequest,
    candidates: ClaimCandidates,
    columns: SqlText,
  ): Plan<Row[]> {
    // A locking read that has to sort locks every row it reads before sorting, so claimers would
    // queue behind each other. Pick a window without locks first, then lock within it by primary
    // key; the conditions are checked again on the locked rows.
    // The window read costs the server more than the claim statement (each candidate is read by
    // primary key to test it): on MariaDB, while claims meet no other claimer, it holds the
    // limit plus the limits of this process's other running claims (whatever their phase, the
    // ids they lock or lease may be in this window and are left out, see `takenSince`).
    const oneStatement = this.mariadb && this.oneStatementClaim !== false;
    const others = this.runningLimits - req.limit;
    const windowSize = oneStatement
      ? Math.ceil(req.limit * this.windowFactor) + others
      : req.limit * CLAIM_WINDOW;
    const { rows: window } = yield candidates({ limit: windowSize, lock: false });
    if (window.length === 0) return [];
    let within = window.map((r) => r.id);
    // A full window read smaller than `CLAIM_WINDOW` limits may run out of untaken ids (a claim
    // of this process that started after it took some): then the full size is read once more.
    let reread = window.length === windowSize && windowSize < req.limit * CLAIM_WINDOW + others;
    if (this.mariadb && this.oneStatementClaim === undefined) {
      const { rows } = yield sql`SELECT @@SESSION.binlog_format AS format`;
      this.oneStatementClaim = String(rows[0]?.format ?? '').toUpperCase() !== 'STATEMENT';
      // This claim ran outside a transaction: if it must not claim in one statement, claim
      // nothing now; the next claim runs in a transaction (`claimRunOptions`).
      if (!this.oneStatementClaim) return [];
    }
    if (this.mariadb && this.oneStatementClaim) {
      // MariaDB's INSERT … SELECT reads its own table through a temporary table, so it locks
      // every row it reads before the LIMIT applies. It is given `limit` ids of the window at a
      // time, oldest first, leaving out those other claims of this process are locking or have
      // just leased (the dispatcher claims ahead, so two claims often read the same window).
      // Claims of other processes cannot be seen: ids that yield fewer rows than asked (another
      // claimer holds or took them) are followed by the next ones of the window, within this
      // call, since a short batch tells the dispatcher nothing more is pending.
      const tried = new Set<unknown>();
      const claimed: Row[] = [];
      let contended = false;
      while (claimed.length < req.limit) {
        const taken = this.takenSince(since);
        const ids: unknown[] = [];
        for (const id of within) {
          if (ids.length === req.limit) break;
          if (!tried.has(id) && !taken(id)) ids.push(id);
        }
        if (ids.length === 0) {
          if (!reread) break;
          reread = false;
          contended = true;
          within = (yield candidates({
            limit: req.limit * CLAIM_WINDOW + others,
            lock: false,
          })).rows.map((r) => r.id);
          continue;
        }
        for (const id of ids) {
          tried.add(id);
          this.claiming.add(id);
        }
        let rows: Row[];
        try {
          rows = yield* this.claimWithin(
            { ...req, limit: req.limit - claimed.length },
            candidates,
            ids,
          );
        } finally {
          for (const id of ids) this.claiming.delete(id);
        }
        this.claimsDone++;
        if (rows.length < Math.min(ids.length, req.limit - claimed.length)) contended = true;
        if (rows.length > 0) {
          this.leasedRecently.push({ done: this.claimsDone, ids: rows.map((r) => r.id) });
        }
        for (const r of rows) claimed.push(MysqlDialect.unpackClaimed(r));
      }
      this.windowFactor = contended
        ? CLAIM_WINDOW
        : Math.max(1, this.windowFactor - CLAIM_WINDOW_DECAY);
      return claimed;
    }
    const { rows: picked } = yield candidates({ limit: req.limit, lock: true, within });
    if (picked.length === 0) return [];
    const ids = list(picked.map((r) => r.id));
    yield sql`UPDATE ${this.tables.deliveries} ${this.byId} SET status = 'leased', attempts = attempts + 1, lease_owner = ${req.owner}, lease_token = ${req.token}, lease_until = ${this.plusMs(this.now, req.leaseMs)} WHERE id IN (${ids})`;
    const { rows } =
      yield sql`SELECT ${columns} FROM ${this.tables.deliveries} d ${this.byId} JOIN ${this.tables.events} e ON e.seq = d.event_seq WHERE d.id IN (${ids})`;
    return rows;
  }

  /**
   * Runs `claimStatement` at READ COMMITTED: `SET TRANSACTION` without a scope sets the isolation
   * of the session's next transaction only, here the claim statement's own (autocommit), so the
   * pooled connection goes back to its users unchanged. At MariaDB's default REPEATABLE READ,
   * InnoDB reads every table of an `INSERT … SELECT` with locking reads (next-key locks): the
   * per-key and unexpanded `NOT EXISTS` subqueries then waited for any transaction holding a row
   * or gap they read — an application transaction that appended an event of a key and had not
   * committed stalled every claim, of all keys and handlers, for up to `innodb_lock_wait_timeout`.
   * At READ COMMITTED they are consistent reads of the latest committed rows, and `FOR UPDATE
   * SKIP LOCKED` still locks (or skips) the claimed rows. A statement that fails leaves the
   * one-shot isolation pending (MariaDB clears it only when a transaction commits), so it is
   * reset to the session's level before the error goes on.
   */
  private *claimWithin(
    req: ClaimPlanRequest,
    candidates: ClaimCandidates,
    ids: unknown[],
  ): Plan<Row[]> {
    try {
      // Sent back to back: one wait for the event loop instead of two. The SET fails only with
      // its connection (a pooled connection in autocommit has no transaction in progress), and
      // the claim statement with it.
      return (yield new BackToBack(
        sql`SET TRANSACTION ISOLATION LEVEL READ COMMITTED`,
        this.claimStatement(req, candidates, ids),
      )).rows;
    } catch (error) {
      try {
        yield sql`SET SESSION tx_isolation = @@SESSION.tx_isolation`;
      } catch {
        // The connection is gone with its one-shot isolation.
      }
      throw error;
    }
  }

  /**
   * MariaDB's last claim statement, in autocommit: it locks the claimable rows among
   * the given ids (`FOR UPDATE SKIP LOCKED` by primary key, conditions checked again on the
   * locked rows), leases them through `INSERT … SELECT … ON DUPLICATE KEY UPDATE` (MariaDB has no
   * `UPDATE … RETURNING`, but its `INSERT … RETURNING` returns the updated rows), and returns them
   * with their event's columns, read by primary key in the `RETURNING` list as one JSON array.
   * It runs at READ COMMITTED (see `claimWithin`), where the locking read locks (or skips) the
   * rows it leases, by primary key, and the subqueries lock nothing. The locks last for the
   * statement only: by then every locked row is leased or was never ours to take.
   */
  private claimStatement(
    req: ClaimPlanRequest,
    candidates: ClaimCandidates,
    ids: unknown[],
  ): SqlText {
    const D = this.tables.deliveries;
    const E = this.tables.events;
    const own = (column: string) => sql`${D}.${raw(column)}`;
    // One subquery per row for all of the event's columns (seven took twice the time). Each
    // converted to one character set: tables upgraded from older versions mix collations, which
    // JSON_ARRAY refuses.
    const c = (expr: SqlText) => sql`CONVERT(${expr} USING utf8mb4)`;
    const t = (column: string) => c(this.timeOut(raw(`e.${column}`)));
    const columns = ['id', 'type', 'event_key', 'payload', 'headers'].map((n) => c(raw(`e.${n}`)));
    const event = sql`(SELECT JSON_ARRAY(${join([...columns, t('occurred_at'), t('available_at')])}) FROM ${E} e WHERE e.seq = ${own('event_seq')})`;
    return sql`INSERT INTO ${D} (${raw(CLAIM_COPY)}) ${candidates({
      limit: req.limit,
      lock: true,
      within: ids,
      columns: raw(CLAIM_COPY_VALUES),
    })}
ON DUPLICATE KEY UPDATE status = 'leased', attempts = ${own('attempts')} + 1, lease_owner = ${req.owner}, lease_token = ${req.token}, lease_until = ${this.plusMs(this.now, req.leaseMs)}
RETURNING id, handler, attempts, ${this.timeOut(raw('lease_until'))} AS lease_until, event_seq, ${event} AS event`;
  }

  /**
   * A row of `claimWithin` in the shape the store reads (the event's columns unpacked). Built as
   * one object literal: `{ ...row, event_id, … }` cost ~10 µs per row in V8 (the spread then
   * seven new keys walk a fresh map transition per row), more than the rest of the row's decoding.
   */
  private static unpackClaimed(row: Row): Row {
    // mysql2 parses a JSON result itself when the server marks it as JSON; otherwise it is text.
    const packed: unknown = row.event;
    const e = (Array.isArray(packed) ? packed : JSON.parse(String(packed))) as unknown[];
    return {
      id: row.id,
      handler: row.handler,
      attempts: row.attempts,
      lease_until: row.lease_until,
      event_seq: row.event_seq,
      event_id: e[0],
      type: e[1],
      event_key: e[2],
      payload: e[3],
      headers: e[4],
      occurred_at: e[5],
      available_at: e[6],
    };
  }

  /**
   * `GET_LOCK` names are server-wide, so the name carries the current database: two applications
   * with the same table prefix in different databases must not share a lock. Names are at most 64
   * characters; a longer one is replaced by a hash of itself.
   */
  private lockName(name: string): SqlText {
    const rest = name.startsWith(LOCK_TAG) ? name.slice(LOCK_TAG.length) : name;
    return sql`(SELECT IF(CHAR_LENGTH(n) <= 64, n, CONCAT(${LOCK_TAG}, SHA1(n))) FROM (SELECT CONCAT(${LOCK_TAG}, COALESCE(DATABASE(), ''), '.', ${rest}) AS n) AS lock_name)`;
  }

  tryLock(name: string): SqlText {
    return sql`SELECT GET_LOCK(${this.lockName(name)}, 0) AS ok`;
  }

  lock(name: string, timeoutSeconds: number): SqlText {
    return sql`SELECT GET_LOCK(${this.lockName(name)}, ${timeoutSeconds}) AS ok`;
  }

  unlock(name: string): SqlText | null {
    return sql`SELECT RELEASE_LOCK(${this.lockName(name)}) AS ok`;
  }

  *inspectServer(): Plan<void> {
    const { rows } = yield sql`SELECT VERSION() AS version`;
    this.collation = mysqlTextCollation(String(rows[0]?.version ?? ''));
  }

  protected ddl(): SchemaDdl {
    return mysqlDdl(this.tables, this.collation);
  }
}
