import type { SqlConnection, SqlExecutor, SqlStatement } from '../../../executors/sql-executor';
import { EMPTY, join, list, raw, sql, SqlText } from '../sql';
import { OutboxTableNames } from '../schema/tables';

export type Row = Record<string, any>;

export interface StatementResult {
  rows: Row[];
  affected: number;
}

/**
 * A store operation written once as a sequence of statements: it yields each statement and gets
 * its result back. The dialect decides how to run it (pooled connection, transaction, or — for
 * SQLite — synchronously so nothing else interleaves on the single shared connection).
 */
export type Plan<T> = Generator<SqlText, T, StatementResult>;

export interface RunOptions {
  /** Run every statement in one transaction (otherwise each statement commits on its own). */
  transaction?: boolean;
  /** Retries when the database picks this transaction as a deadlock victim. @default 0 */
  deadlockRetries?: number;
  isolation?: 'READ COMMITTED';
}

/** An event row ready to insert (payload and headers already serialized). */
export interface EventInsert {
  id: string;
  type: string;
  key: string | null;
  payload: string;
  headers: string;
  occurredAt: Date;
  availableAt: Date | null;
}

export interface InsertedEvent {
  seq: number;
  availableAt: Date;
}

/** An event to append with the deliveries it starts with (ids made by the library). */
export interface AppendRow extends EventInsert {
  deliveries: Array<{ id: string; handler: string }>;
}

export interface ClaimPlanRequest {
  handlers: string[];
  limit: number;
  leaseMs: number;
  owner: string;
  token: string;
  /**
   * Per handler (in `handlers`' order), how many of its candidates the claim checks first, for
   * dialects that claim per handler (`claimPerHandler`); see `ClaimCandidates`.
   */
  handlerLimits?: readonly number[];
}

/**
 * Builds the query selecting claimable delivery ids, oldest first: due pending (or expired leased)
 * deliveries of the worker's handlers that are the oldest open one of their (handler, key).
 * `within` narrows it to given ids; `lock` adds the dialect's `FOR UPDATE SKIP LOCKED`.
 * `ClaimOp` keeps one function per set of subscriptions, and its text depends only on the options
 * (`lock`, `columns`, how many ids `within` has), never on the values bound: a dialect may reuse
 * the text of an earlier claim with the same function (PostgreSQL's `claim` does).
 */
export type ClaimCandidates = (options: {
  limit: number;
  lock: boolean;
  within?: unknown[];
  /** Select list over the alias `c` (default: `c.id`). */
  columns?: SqlText;
  /**
   * Per handler, how many candidates to check before the remainder (a per-handler claim with
   * several handlers; default: `limit` each). Values only: they never change the text.
   */
  handlerLimits?: readonly number[];
}) => SqlText;

export interface RowMove {
  from: SqlText;
  to: SqlText;
  where: SqlText;
  limit?: number;
  columns: string;
  values: SqlText;
}

/** A lease as the SQL operations need it. */
export interface LeaseRef {
  deliveryId: string;
  owner: string;
  token: string;
}

/** `(id = ? AND lease_owner = ? AND lease_token = ?) OR …` for dialects without arrays. */
export function leasePairs(leases: readonly LeaseRef[]): SqlText {
  return join(
    leases.map(
      (l) => sql`(id = ${l.deliveryId} AND lease_owner = ${l.owner} AND lease_token = ${l.token})`,
    ),
    ' OR ',
  );
}

/**
 * `moveRows` for dialects without `DELETE … RETURNING` in a CTE: pick (and, with `lock`, lock)
 * the ids, copy those rows, delete them. Runs inside a transaction.
 */
export function* moveByIds(move: RowMove, lock: SqlText): Plan<Row[]> {
  const limit = move.limit ? sql` ORDER BY id LIMIT ${raw(String(Math.floor(move.limit)))}` : EMPTY;
  const { rows } = yield sql`SELECT id FROM ${move.from} WHERE ${move.where}${limit} ${lock}`;
  if (rows.length === 0) return [];
  const ids = list(rows.map((r) => r.id));
  yield sql`INSERT INTO ${move.to} (${raw(move.columns)}) SELECT ${move.values} FROM ${move.from} WHERE id IN (${ids})`;
  yield sql`DELETE FROM ${move.from} WHERE id IN (${ids})`;
  return rows;
}

export type DialectName = 'postgres' | 'mysql' | 'sqlite';

/**
 * Everything that differs between PostgreSQL, MySQL/MariaDB and SQLite: SQL fragments, schema,
 * the claim statement(s) and how statements are executed. One implementation per file.
 */
export interface SqlDialect {
  readonly name: DialectName;
  readonly tables: OutboxTableNames;

  /** The database clock as a value of the time columns' type. */
  readonly now: SqlText;
  /** The database clock as epoch milliseconds (stored inside JSON error entries). */
  readonly nowMs: SqlText;
  plusMs(base: SqlText, ms: number): SqlText;
  /** A time parameter in the time columns' representation. */
  time(value: Date): SqlText;
  /** Select expression for a time column that `readTime` understands. */
  timeOut(expr: SqlText): SqlText;
  readTime(value: unknown): Date;
  /** Select expression returning a JSON column as text. */
  jsonOut(expr: SqlText): SqlText;
  /**
   * Select list `error_name, error_message`: the name and message of the last entry of a JSON
   * error array column, both NULL when it is empty (the summary reads no more of the history).
   */
  lastError(errors: SqlText): SqlText;
  /**
   * `expr` is one of `values`. PostgreSQL binds them as one array, so the statement text is the
   * same for any number of values; the others bind an `IN` list (empty: matches nothing).
   */
  anyOf(expr: SqlText, values: readonly unknown[], type: 'uuid' | 'bigint'): SqlText;
  /** A UUID parameter where the database cannot infer the type (PostgreSQL `UNION`). */
  uuid(value: string): SqlText;
  /** Appends one error object to a JSON array column, keeping the last `keep` entries. */
  appendError(
    column: SqlText,
    error: { name: string; message: string; attempt: number; workerId: string; stack?: string },
    keep: number,
  ): SqlText;
  /**
   * Moves the rows of `from` matching `where` (at most `limit`, when given) into `to` in one
   * transaction or statement: `values` is the select list over the source row (`columns` order).
   * Returns the moved ids. Rows another transaction holds are skipped or waited for, never
   * moved twice.
   */
  moveRows(move: RowMove): Plan<Row[]>;
  /** Whether `moveRows` needs a transaction around it (more than one statement). */
  readonly moveRunOptions: RunOptions;
  /**
   * Deletes the leased deliveries whose lease (owner, token) still holds and is live; returns
   * their ids. One statement where the dialect allows it.
   */
  deleteLeased(leases: readonly LeaseRef[]): Plan<Row[]>;
  readonly deleteLeasedRunOptions: RunOptions;
  /** Row-locking suffix for claim candidates. */
  readonly skipLocked: SqlText;
  /**
   * Suffix that makes a read see the latest committed rows rather than the transaction's snapshot
   * (MySQL's REPEATABLE READ: a shared locking read); empty where a new statement already does.
   */
  readonly latestRead: SqlText;
  /**
   * The claim reads each handler's part of the claim index on its own (PostgreSQL: a generic
   * prepared plan; see `ClaimOp.candidatesOf`). Dialects that plan every claim with its values
   * leave it unset.
   */
  readonly claimPerHandler?: boolean;
  /**
   * Index hint for statements that address deliveries by id. MySQL's optimizer, with the
   * statistics of a young table, may otherwise walk a status index and lock every row it reads.
   */
  readonly byId: SqlText;
  /** Whether `UPDATE … RETURNING` exists. */
  readonly updateReturning: boolean;
  /** Largest payload bytes put in one INSERT (MySQL's max_allowed_packet). */
  readonly maxStatementBytes: number;

  /**
   * Inserts events with their deliveries; returns those it inserted, by lower-cased id. An id that
   * exists already is either skipped (absent from the result) or fails the first statement with a
   * unique violation before anything is written; either way nothing of that event is written.
   */
  appendEvents(rows: AppendRow[]): Plan<Map<string, InsertedEvent>>;
  /**
   * The usual append without the plan runner: one event in one statement on `connection`, the
   * same statement `appendEvents` sends for a single row. Resolves with what was inserted, or
   * `null` when the id exists already (nothing of the event written). Absent where one event
   * takes more than one statement (MySQL/MariaDB, SQLite).
   */
  appendOneOn?(connection: SqlConnection, row: AppendRow): Promise<InsertedEvent | null>;
  /**
   * Leases the deliveries `candidates` selects and returns `columns` (over aliases `d` for the
   * delivery and `e` for its event) of each claimed row.
   */
  claim(request: ClaimPlanRequest, candidates: ClaimCandidates, columns: SqlText): Plan<Row[]>;
  readonly claimRunOptions: RunOptions;
  /** Statement trying to take a named lock for the current transaction/session: returns `ok`. */
  tryLock(name: string): SqlText;
  lock(name: string, timeoutSeconds: number): SqlText;
  unlock(name: string): SqlText | null;

  /**
   * Reads what the DDL depends on from the server (MySQL and MariaDB name their NO PAD binary
   * collations differently); run before `createSchema` and `upgradeSchema`.
   */
  inspectServer?(): Plan<void>;
  /** DDL that creates everything (idempotent, `IF NOT EXISTS`). */
  createSchema(): string[];
  dropSchema(): string[];
  /** Statement bounding how long this transaction waits for table locks, where supported. */
  lockTimeout(seconds: number): SqlText | null;
  isLockTimeout(error: unknown): boolean;
  /** DDL/DML bringing version-1 tables to the current layout (idempotent). */
  upgradeSchema(): string[];
  /** An "already there / already gone" answer to an index DDL the dialect cannot guard. */
  isRedundantDdl(error: unknown): boolean;

  run<T>(plan: () => Plan<T>, options?: RunOptions): Promise<T>;
  /**
   * Runs on the caller's transaction (as its executor recognised it), inside whatever it has
   * open. No savepoint: plans run this way are written so that a failing statement writes
   * nothing that needs undoing.
   */
  runOn<T>(connection: SqlConnection, plan: () => Plan<T>): Promise<T>;
  isUniqueViolation(error: unknown): boolean;
}

export interface DialectContext {
  /** Carries the statements (lib/executors): TypeORM, node-postgres, … */
  executor: SqlExecutor;
  tables: OutboxTableNames;
  /** Keep hot statements prepared per connection where the dialect can. @default true */
  preparedStatements: boolean;
}

/** Delivery rows per INSERT; keeps every dialect under its bound-parameter limit. */
const DELIVERY_ROWS_PER_INSERT = 2000;

/** Inserts the deliveries of freshly inserted events (VALUES-list dialects). */
export function* insertDeliveries(
  d: SqlDialect,
  rows: AppendRow[],
  inserted: Map<string, InsertedEvent>,
): Plan<void> {
  const values: SqlText[] = [];
  for (const row of rows) {
    const event = inserted.get(row.id.toLowerCase());
    if (!event) continue;
    for (const delivery of row.deliveries) {
      values.push(
        sql`(${delivery.id}, ${event.seq}, ${row.type}, ${row.key}, ${delivery.handler}, 'pending', 0, ${d.time(event.availableAt)}, '[]')`,
      );
    }
  }
  for (let i = 0; i < values.length; i += DELIVERY_ROWS_PER_INSERT) {
    yield sql`INSERT INTO ${d.tables.deliveries} (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors) VALUES ${join(values.slice(i, i + DELIVERY_ROWS_PER_INSERT))}`;
  }
}

/** `anyOf` for dialects without array parameters. */
export function inList(expr: SqlText, values: readonly unknown[]): SqlText {
  return sql`${expr} IN (${list(values)})`;
}

/** Drives a plan with an async executor. Errors are thrown into the plan so it can react. */
export async function driveAsync<T>(
  plan: Plan<T>,
  exec: (stmt: SqlText) => Promise<StatementResult>,
): Promise<T> {
  let step = plan.next();
  while (!step.done) {
    let result: StatementResult;
    try {
      result = await exec(step.value);
    } catch (error) {
      step = plan.throw(error);
      continue;
    }
    step = plan.next(result);
  }
  return step.value;
}

export function driveSync<T>(plan: Plan<T>, exec: (stmt: SqlText) => StatementResult): T {
  let step = plan.next();
  while (!step.done) {
    let result: StatementResult;
    try {
      result = exec(step.value);
    } catch (error) {
      step = plan.throw(error);
      continue;
    }
    step = plan.next(result);
  }
  return step.value;
}

/** The driver error inside TypeORM's `QueryFailedError`, or the error itself. */
export function driverError(error: unknown): { code?: unknown; errno?: unknown; message?: string } {
  const e = error as { driverError?: unknown };
  return ((e && typeof e === 'object' && e.driverError) || error || {}) as any;
}

/** A dialect's DDL: create the tables, drop them, bring version-1 tables forward. */
export interface SchemaDdl {
  create: string[];
  drop: string[];
  upgrade: string[];
  /** The statement recording that the tables are at `version`, for migrations written as SQL. */
  record: (version: number) => string;
}

/**
 * Shared by the dialects: statements are compiled to the dialect's placeholder style and carried
 * by the store's executor (lib/executors): on a pooled connection, in a transaction it opens, or
 * on the caller's transaction. (The name is older than the executors.)
 */
export abstract class QueryRunnerDialect {
  constructor(protected readonly ctx: DialectContext) {}

  protected abstract compile(stmt: SqlText): { text: string; params: unknown[] };
  protected abstract isDeadlock(error: unknown): boolean;
  protected abstract ddl(): SchemaDdl;

  createSchema(): string[] {
    return this.ddl().create;
  }

  dropSchema(): string[] {
    return this.ddl().drop;
  }

  upgradeSchema(): string[] {
    return this.ddl().upgrade;
  }

  /** The statement an executor runs for `stmt`. */
  protected statement(stmt: SqlText): SqlStatement {
    return this.compile(stmt);
  }

  protected exec(connection: SqlConnection, stmt: SqlText): Promise<StatementResult> {
    return connection.query(this.statement(stmt));
  }

  async run<T>(plan: () => Plan<T>, options: RunOptions = {}): Promise<T> {
    const { executor } = this.ctx;
    const drive = (c: SqlConnection) => driveAsync(plan(), (s) => this.exec(c, s));
    for (let attempt = 0; ; attempt++) {
      try {
        return options.transaction
          ? await executor.transaction(drive, { isolation: options.isolation })
          : await executor.connection(drive);
      } catch (error) {
        if (attempt < (options.deadlockRetries ?? 0) && this.isDeadlock(error)) {
          // A short random pause lets the other transaction finish before we try again.
          await new Promise((resolve) =>
            setTimeout(resolve, 5 + Math.random() * 20 * (attempt + 1)),
          );
          continue;
        }
        throw error;
      }
    }
  }

  runOn<T>(connection: SqlConnection, plan: () => Plan<T>): Promise<T> {
    return driveAsync(plan(), (s) => this.exec(connection, s));
  }
}
