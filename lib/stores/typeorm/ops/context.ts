import type { SqlExecutor } from '../../../executors/sql-executor';
import { OutboxEvent } from '../../../interfaces/outbox-event.interface';
import { DeliveryError } from '../../../interfaces/outbox-store.interface';
import { createDialect } from '../dialects';
import { Plan, Row, SqlDialect, StatementResult } from '../dialects/sql-dialect';
import { OutboxTableOptions } from '../schema/tables';
import { raw, sql, SqlText } from '../sql';

export interface TypeOrmOutboxStoreOptions extends OutboxTableOptions {
  /** Longest error message stored per failure, in characters. @default 4096 */
  errorMaxLength?: number;
  /** `init()` creates missing tables (see `ensureOutboxSchema`). @default false */
  ensureSchema?: boolean;
  /**
   * PostgreSQL: run the claim, ack and append as named prepared statements (parsed and planned
   * once per connection). Turn off behind a pooler that does not keep prepared statements
   * (PgBouncer in transaction mode before 1.21). @default true
   */
  preparedStatements?: boolean;
  /** Called when a wake-up NOTIFY or the LISTEN connection fails (logged by the module). */
  onWakeupError?: (error: unknown) => void;
  /**
   * With `ensureSchema: false`: whether the app's inbox table is beside these tables (asked only
   * when the check fails), so the error names the command that migrates both.
   */
  inboxAlongside?: () => boolean;
}

/** Ids bound in one statement by bulk operations (replay, purge, cleanup, undo). */
export const ID_BATCH = 1000;

/**
 * What every operation of the SQL store shares: the executor, its dialect, the options,
 * and the few row helpers all of them read events with. One per store.
 */
export class StoreContext {
  readonly dialect: SqlDialect;
  readonly errorMaxLength: number;
  /**
   * The placeholder probe is skipped until this time (`performance.now()`): set by the claim
   * after an empty probe, reset by committed appends of placeholders and by wake-ups.
   */
  expandQuietUntil = 0;

  constructor(
    readonly executor: SqlExecutor,
    readonly options: TypeOrmOutboxStoreOptions,
  ) {
    this.dialect = createDialect(executor, options);
    this.errorMaxLength = options.errorMaxLength ?? 4096;
  }

  get E(): SqlText {
    return this.dialect.tables.events;
  }

  get D(): SqlText {
    return this.dialect.tables.deliveries;
  }

  get DL(): SqlText {
    return this.dialect.tables.deadLetters;
  }

  /** Runs one statement on a pooled connection. */
  one<T = StatementResult>(stmt: SqlText, map?: (r: StatementResult) => T): Promise<T> {
    return this.dialect.run(function* (): Plan<T> {
      const result = yield stmt;
      return map ? map(result) : (result as T);
    });
  }

  /** Select list of an event row under alias `e`, in the shape `toEvent` reads. */
  eventColumns(e: string): SqlText {
    const d = this.dialect;
    const c = (name: string) => raw(`${e}.${name}`);
    return sql`${c('id')} AS event_id, ${c('type')} AS type, ${c('event_key')} AS event_key, ${d.jsonOut(c('payload'))} AS payload, ${d.jsonOut(c('headers'))} AS headers, ${d.timeOut(c('occurred_at'))} AS occurred_at, ${d.timeOut(c('available_at'))} AS available_at`;
  }

  toEvent(r: Row): OutboxEvent {
    return {
      id: String(r.event_id),
      type: String(r.type),
      payload: JSON.parse(String(r.payload)),
      key: r.event_key === null || r.event_key === undefined ? null : String(r.event_key),
      headers: r.headers === '{}' ? {} : (JSON.parse(String(r.headers)) as Record<string, string>),
      occurredAt: this.dialect.readTime(r.occurred_at),
      availableAt: this.dialect.readTime(r.available_at),
    };
  }
}

export function isTruthy(value: unknown): boolean {
  return value === true || value === 1 || value === '1' || value === 't' || value === 1n;
}

export function parseErrors(value: unknown): DeliveryError[] {
  const list = (typeof value === 'string' ? JSON.parse(value) : (value ?? [])) as Array<
    Record<string, unknown>
  >;
  return list.map((e) => ({
    name: String(e.name),
    message: String(e.message),
    ...(typeof e.stack === 'string' ? { stack: e.stack } : {}),
    attempt: Number(e.attempt),
    workerId: String(e.workerId),
    at: new Date(Number(e.at)),
  }));
}
