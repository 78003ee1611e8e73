import { OUTBOX_ERROR_HISTORY } from '../../../outbox.constants';
import { join, list, raw, sql, SqlText } from '../sql';
import { OutboxTableNames } from '../typeorm-outbox.tables';
import {
  ClaimCandidates,
  ClaimPlanRequest,
  DialectContext,
  driverError,
  AppendRow,
  InsertedEvent,
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
} from './sql-dialect';

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
  return { create, drop, upgrade };
}

const LOCK_TAG = 'nestjs-outbox:';

/** Candidates read per claim, as a multiple of the limit, for concurrent claimers to share. */
const CLAIM_WINDOW = 4;

/** The columns MariaDB's claim copies onto the rows it leases (every NOT NULL one without default). */
const CLAIM_COPY =
  'id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors';

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
  readonly byId = raw('FORCE INDEX (PRIMARY)');
  readonly updateReturning = false;
  // Stay well below the default max_allowed_packet (16 MiB on MariaDB, 64 MiB on MySQL 8).
  readonly maxStatementBytes = 4 * 1024 * 1024;

  /** MariaDB has `INSERT/DELETE … RETURNING`; MySQL does not. */
  private readonly mariadb: boolean;
  /** Text collation of the DDL; `inspectServer` sets the server's own. */
  private collation = mysqlTextCollation('MariaDB');

  constructor(ctx: DialectContext) {
    super(ctx);
    this.tables = ctx.tables;
    this.mariadb = ctx.dataSource.options.type === 'mariadb';
    // MariaDB claims in two autocommit statements (see `claim`). MySQL claims in a short
    // READ COMMITTED transaction, which takes no next-key (gap) locks, the usual source of claim
    // deadlocks; the few that remain are retried.
    this.claimRunOptions = this.mariadb
      ? { deadlockRetries: 5 }
      : { transaction: true, isolation: 'READ COMMITTED', deadlockRetries: 5 };
  }

  readonly claimRunOptions: RunOptions;

  protected compile(stmt: SqlText): { text: string; params: unknown[] } {
    // mysql2 reads `??` as an identifier placeholder; shared SQL must never produce it.
    if (stmt.text.includes('??'))
      throw new Error(`nestjs-outbox: ambiguous placeholder in ${stmt.text}`);
    return { text: stmt.text, params: [...stmt.params] };
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

  uuid(value: string): SqlText {
    return sql`${value}`;
  }

  appendError(
    column: SqlText,
    e: { name: string; message: string; attempt: number; workerId: string },
    keep = OUTBOX_ERROR_HISTORY,
  ): SqlText {
    return sql`JSON_ARRAY_APPEND(IF(JSON_LENGTH(${column}) >= ${raw(String(keep))}, JSON_REMOVE(${column}, '$[0]'), ${column}), '$', JSON_OBJECT('name', ${e.name}, 'message', ${e.message}, 'attempt', ${e.attempt}, 'workerId', ${e.workerId}, 'at', ${this.nowMs}))`;
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
    const where = sql`id IN (${list(leases.map((l) => l.deliveryId))}) AND status = 'leased' AND lease_until > ${this.now} AND (${leasePairs(leases)})`;
    if (this.mariadb) return (yield sql`DELETE FROM ${D} WHERE ${where} RETURNING id`).rows;
    const { rows } = yield sql`SELECT id FROM ${D} ${this.byId} WHERE ${where} FOR UPDATE`;
    if (rows.length > 0) yield sql`DELETE FROM ${D} WHERE id IN (${list(rows.map((r) => r.id))})`;
    return rows;
  }

  *claim(req: ClaimPlanRequest, candidates: ClaimCandidates, columns: SqlText): Plan<Row[]> {
    // A locking read that has to sort locks every row it reads before sorting, so claimers would
    // queue behind each other. Pick a window without locks first, then lock within it by primary
    // key; the conditions are checked again on the locked rows.
    const { rows: window } = yield candidates({ limit: req.limit * CLAIM_WINDOW, lock: false });
    if (window.length === 0) return [];
    const within = window.map((r) => r.id);
    if (this.mariadb) return (yield this.claimWithin(req, candidates, within)).rows;
    const { rows: picked } = yield candidates({ limit: req.limit, lock: true, within });
    if (picked.length === 0) return [];
    const ids = list(picked.map((r) => r.id));
    yield sql`UPDATE ${this.tables.deliveries} ${this.byId} SET status = 'leased', attempts = attempts + 1, lease_owner = ${req.owner}, lease_token = ${req.token}, lease_until = ${this.plusMs(this.now, req.leaseMs)} WHERE id IN (${ids})`;
    const { rows } =
      yield sql`SELECT ${columns} FROM ${this.tables.deliveries} d ${this.byId} JOIN ${this.tables.events} e ON e.seq = d.event_seq WHERE d.id IN (${ids})`;
    return rows;
  }

  /**
   * MariaDB's second (and last) claim statement, in autocommit: it locks the claimable rows of
   * the window (`FOR UPDATE SKIP LOCKED`, conditions checked again on the locked rows, oldest
   * first), leases them through `INSERT … SELECT … ON DUPLICATE KEY UPDATE` (MariaDB has no
   * `UPDATE … RETURNING`, but its `INSERT … RETURNING` returns the updated rows), and returns them
   * with their event's columns read by primary key in the `RETURNING` list. The locks last for
   * the statement only: by then every locked row is leased or was never ours to take.
   */
  private claimWithin(
    req: ClaimPlanRequest,
    candidates: ClaimCandidates,
    within: unknown[],
  ): SqlText {
    const D = this.tables.deliveries;
    const E = this.tables.events;
    const own = (column: string) => sql`${D}.${raw(column)}`;
    const event = (column: string) =>
      sql`(SELECT e.${raw(column)} FROM ${E} e WHERE e.seq = ${own('event_seq')})`;
    return sql`INSERT INTO ${D} (${raw(CLAIM_COPY)}) ${candidates({
      limit: req.limit,
      lock: true,
      within,
      columns: raw(CLAIM_COPY.replace(/(\w+)/g, 'c.$1')),
    })}
ON DUPLICATE KEY UPDATE status = 'leased', attempts = ${own('attempts')} + 1, lease_owner = ${req.owner}, lease_token = ${req.token}, lease_until = ${this.plusMs(this.now, req.leaseMs)}
RETURNING id, handler, attempts, lease_owner, lease_token, ${this.timeOut(raw('lease_until'))} AS lease_until, event_seq, ${event('id')} AS event_id, ${event('type')} AS type, ${event('event_key')} AS event_key, ${event('payload')} AS payload, ${event('headers')} AS headers, ${this.timeOut(event('occurred_at'))} AS occurred_at, ${this.timeOut(event('available_at'))} AS available_at`;
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

  createSchema(): string[] {
    return mysqlDdl(this.tables, this.collation).create;
  }

  dropSchema(): string[] {
    return mysqlDdl(this.tables, this.collation).drop;
  }

  upgradeSchema(): string[] {
    return mysqlDdl(this.tables, this.collation).upgrade;
  }
}
