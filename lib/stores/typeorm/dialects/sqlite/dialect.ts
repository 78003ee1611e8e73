import { sqliteDdl } from './ddl';
import { typeOrmDataSourceOf } from '../../../../executors/typeorm-executor';
import { OUTBOX_ERROR_HISTORY } from '../../../../outbox.constants';
import { OutboxOptionsError } from '../../../../errors/outbox-options.error';
import { EMPTY, join, list, raw, sql, SqlText } from '../../sql';
import { OutboxTableNames } from '../../schema/tables';
import {
  ClaimCandidates,
  ClaimPlanRequest,
  DialectContext,
  driveSync,
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
  StatementResult,
  SchemaDdl,
} from '../sql-dialect';

interface BetterSqliteStatement {
  reader: boolean;
  all(...params: unknown[]): Row[];
  run(...params: unknown[]): { changes: number };
}

interface BetterSqliteDatabase {
  inTransaction: boolean;
  prepare(source: string): BetterSqliteStatement;
  transaction<T>(fn: () => T): { immediate(): T };
}

/** How long an outbox operation waits for the application's open transaction to finish. */
const IDLE_WAIT_MS = 30_000;

/**
 * better-sqlite3 gives TypeORM one connection shared by everything. Outbox operations therefore
 * run synchronously on it once no application transaction is open, so no other query can slip
 * into the middle of them and none of them can land inside someone else's transaction.
 */
export class SqliteDialect extends QueryRunnerDialect implements SqlDialect {
  readonly name = 'sqlite';
  readonly tables: OutboxTableNames;
  // 'now' is fixed for the duration of one statement, so every row of a claim sees one time.
  readonly now = raw("CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)");
  readonly nowMs = this.now;
  readonly skipLocked = raw('');
  readonly latestRead = EMPTY;
  readonly byId = raw('');
  readonly updateReturning = true;
  readonly maxStatementBytes = 256 * 1024 * 1024;
  readonly claimRunOptions: RunOptions = { transaction: true };
  private readonly statements = new Map<string, BetterSqliteStatement>();

  constructor(ctx: DialectContext) {
    super(ctx);
    this.tables = ctx.tables;
  }

  private db(): BetterSqliteDatabase {
    // Only TypeORM reaches SQLite in this release: the synchronous path uses its connection.
    const dataSource = typeOrmDataSourceOf(this.ctx.executor);
    const db = (dataSource?.driver as unknown as { databaseConnection?: BetterSqliteDatabase })
      ?.databaseConnection;
    if (!db) {
      throw new OutboxOptionsError(
        'store.dataSource',
        'the SQLite DataSource is not initialized; call dataSource.initialize() first',
      );
    }
    return db;
  }

  protected compile(stmt: SqlText): { text: string; params: unknown[] } {
    return { text: stmt.text, params: [...stmt.params] };
  }

  protected isDeadlock(): boolean {
    return false;
  }

  lockTimeout(): null {
    return null;
  }

  isLockTimeout(): boolean {
    return false;
  }

  isRedundantDdl(): boolean {
    return false;
  }

  isUniqueViolation(error: unknown): boolean {
    const code = driverError(error).code;
    return code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
  }

  private execSync(db: BetterSqliteDatabase, stmt: SqlText): StatementResult {
    let prepared = this.statements.get(stmt.text);
    if (!prepared) {
      prepared = db.prepare(stmt.text);
      if (this.statements.size > 200) this.statements.clear();
      this.statements.set(stmt.text, prepared);
    }
    if (prepared.reader) {
      const rows = prepared.all(...stmt.params);
      return { rows, affected: rows.length };
    }
    return { rows: [], affected: prepared.run(...stmt.params).changes };
  }

  override async run<T>(plan: () => Plan<T>, options: RunOptions = {}): Promise<T> {
    const db = this.db();
    const deadline = Date.now() + IDLE_WAIT_MS;
    while (db.inTransaction) {
      if (Date.now() > deadline) {
        throw new Error(
          `nestjs-outbox: the SQLite connection stayed inside an application transaction for ${IDLE_WAIT_MS} ms; ` +
            'keep transactions short (SQLite has one connection for the whole process)',
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    const go = () => driveSync(plan(), (s) => this.execSync(db, s));
    return options.transaction ? db.transaction(go).immediate() : go();
  }

  plusMs(base: SqlText, ms: number): SqlText {
    return sql`(${base} + ${Math.round(ms)})`;
  }

  time(value: Date): SqlText {
    return sql`${value.getTime()}`;
  }

  timeOut(expr: SqlText): SqlText {
    return expr;
  }

  readTime(value: unknown): Date {
    return new Date(Number(value));
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
    return sql`json_extract(${errors}, '$[#-1].name') AS error_name, json_extract(${errors}, '$[#-1].message') AS error_message`;
  }

  appendError(
    column: SqlText,
    e: { name: string; message: string; attempt: number; workerId: string; stack?: string },
    keep = OUTBOX_ERROR_HISTORY,
  ): SqlText {
    return sql`json_insert(CASE WHEN json_array_length(${column}) >= ${raw(String(keep))} THEN json_remove(${column}, '$[0]') ELSE ${column} END, '$[#]', json_object('name', ${e.name}, 'message', ${e.message}, 'attempt', ${e.attempt}, 'workerId', ${e.workerId}, 'at', ${this.nowMs}${e.stack === undefined ? EMPTY : sql`, 'stack', ${e.stack}`}))`;
  }

  *appendEvents(rows: AppendRow[]): Plan<Map<string, InsertedEvent>> {
    const values = rows.map(
      (e) =>
        sql`(${e.id}, ${e.type}, ${e.key}, ${e.payload}, ${e.headers}, ${this.time(e.occurredAt)}, ${e.availableAt ? this.time(e.availableAt) : this.now})`,
    );
    // A duplicate id fails this first statement, which SQLite undoes alone.
    const { rows: inserted } =
      yield sql`INSERT INTO ${this.tables.events} (id, type, event_key, payload, headers, occurred_at, available_at) VALUES ${join(values)} RETURNING id, seq, available_at`;
    const byId = new Map(
      inserted.map((r) => [
        String(r.id).toLowerCase(),
        { seq: Number(r.seq), availableAt: this.readTime(r.available_at) },
      ]),
    );
    yield* insertDeliveries(this, rows, byId);
    return byId;
  }

  readonly moveRunOptions: RunOptions = { transaction: true };
  readonly deleteLeasedRunOptions: RunOptions = {};

  moveRows(move: RowMove): Plan<Row[]> {
    // The immediate transaction around it already excludes every other writer.
    return moveByIds(move, EMPTY);
  }

  *deleteLeased(leases: readonly LeaseRef[]): Plan<Row[]> {
    const { rows } =
      yield sql`DELETE FROM ${this.tables.deliveries} WHERE id IN (${list(leases.map((l) => l.deliveryId))}) AND status = 'leased' AND lease_until > ${this.now} AND (${leasePairs(leases)}) RETURNING id`;
    return rows;
  }

  *claim(req: ClaimPlanRequest, candidates: ClaimCandidates, columns: SqlText): Plan<Row[]> {
    const { rows: claimed } =
      yield sql`UPDATE ${this.tables.deliveries} SET status = 'leased', attempts = attempts + 1, lease_owner = ${req.owner}, lease_token = ${req.token}, lease_until = ${this.plusMs(this.now, req.leaseMs)} WHERE id IN (${candidates({ limit: req.limit, lock: false })}) RETURNING id`;
    if (claimed.length === 0) return [];
    const { rows } =
      yield sql`SELECT ${columns} FROM ${this.tables.deliveries} d JOIN ${this.tables.events} e ON e.seq = d.event_seq WHERE d.id IN (${list(claimed.map((r) => r.id))})`;
    return rows;
  }

  tryLock(): SqlText {
    return raw('SELECT 1 AS ok');
  }

  lock(): SqlText {
    return raw('SELECT 1 AS ok');
  }

  unlock(): SqlText | null {
    return null;
  }

  protected ddl(): SchemaDdl {
    return sqliteDdl(this.tables);
  }
}
