import { OutboxValidationError } from '../../../errors/outbox-validation.error';
import {
  DeadLetter,
  DeadLetterFilter,
  DeadLetterPage,
  DeadLetterPageQuery,
  DeadLetterReason,
  DeadLetterSelector,
  DeadLetterSummaryRow,
} from '../../../interfaces/outbox-store.interface';
import { isUuid } from '../../../outbox-validation';
import {
  checkDeadLetterFilter,
  checkReplay,
  DeadLetterSummary,
  decodeCursor,
  encodeCursor,
  pageSize,
} from '../../store-helpers';
import { Plan, Row } from '../dialects/sql-dialect';
import { EMPTY, join, raw, sql, SqlText } from '../sql';
import { ID_BATCH, parseErrors, StoreContext } from './context';
import { deleteOrphans } from './maintenance';

/**
 * Column list of deliveries as replay writes them back. `lease_until` is set on the pending row
 * (the replay's time): the claim's mark of a replayed delivery not claimed since, which may sit in
 * front of a later delivery of its key that was claimed while it was dead, and so must wait while
 * that one runs (see `ClaimOp`). Claiming overwrites it; retry and release clear it.
 */
const REPLAY_COLUMNS =
  'id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors, lease_until';

/**
 * `column = value`; a value holding a NUL matches nothing (no stored type, handler or key holds
 * one, and PostgreSQL refuses it in a parameter), as on every other store.
 */
export function textEquals(column: SqlText, value: string): SqlText {
  return typeof value === 'string' && value.includes('\u0000')
    ? raw('1 = 0')
    : sql`${column} = ${value}`;
}

/** Dead letters per statement of the summary. */
const SUMMARY_PAGE = 1000;

/** The admin side of dead letters: list, read, summarize, replay, purge. */
export class DeadLetterOps {
  constructor(private readonly ctx: StoreContext) {}

  /** Conditions selecting dead letters; `a` is the column prefix ('' or 'd.'). */
  private deadWhere(filter: DeadLetterFilter, a = ''): SqlText {
    const d = this.ctx.dialect;
    const col = (c: string) => raw(`${a}${c}`);
    const conds = [raw('1 = 1')];
    if (filter.type !== undefined) conds.push(textEquals(col('event_type'), filter.type));
    if (filter.handler !== undefined) conds.push(textEquals(col('handler'), filter.handler));
    if (filter.key !== undefined) conds.push(textEquals(col('event_key'), filter.key));
    if (filter.failedBefore !== undefined)
      conds.push(sql`${col('dead_at')} < ${d.time(filter.failedBefore)}`);
    if (filter.failedAfter !== undefined)
      conds.push(sql`${col('dead_at')} >= ${d.time(filter.failedAfter)}`);
    return join(conds, ' AND ');
  }

  private selectorWhere(selector: DeadLetterSelector): SqlText | null {
    if ('ids' in selector) {
      const ids = [...new Set(selector.ids.filter(isUuid))];
      if (ids.length === 0) return null;
      return this.ctx.dialect.anyOf(raw('id'), ids, 'uuid');
    }
    return this.deadWhere(selector.filter ?? {});
  }

  private deadColumns(): SqlText {
    const d = this.ctx.dialect;
    return sql`d.id, d.handler, d.attempts, d.reason, ${d.jsonOut(raw('d.errors'))} AS errors, ${d.timeOut(raw('d.dead_at'))} AS dead_at, ${this.ctx.eventColumns('e')}`;
  }

  private toDeadLetter(r: Row): DeadLetter {
    const event = this.ctx.toEvent(r);
    return {
      id: String(r.id),
      eventId: event.id,
      type: event.type,
      key: event.key,
      handler: String(r.handler),
      payload: event.payload,
      headers: event.headers,
      occurredAt: event.occurredAt,
      attempts: Number(r.attempts),
      reason: (r.reason ?? 'exhausted') as DeadLetterReason,
      errors: parseErrors(r.errors),
      deadAt: this.ctx.dialect.readTime(r.dead_at),
    };
  }

  async list(query: DeadLetterPageQuery): Promise<DeadLetterPage> {
    const { ctx } = this;
    const d = ctx.dialect;
    const limit = pageSize(query.limit);
    checkDeadLetterFilter(query, '');
    const after = query.cursor ? decodeCursor(query.cursor) : null;
    if (after && !isUuid(after.id))
      throw new OutboxValidationError('cursor', 'is not a cursor returned by a previous page');
    const keyset = after
      ? sql` AND (d.dead_at > ${d.time(after.deadAt)} OR (d.dead_at = ${d.time(after.deadAt)} AND d.id > ${after.id}))`
      : EMPTY;
    const { rows } = await ctx.one(
      sql`SELECT ${this.deadColumns()} FROM ${ctx.DL} d JOIN ${ctx.E} e ON e.seq = d.event_seq WHERE ${this.deadWhere(query, 'd.')}${keyset} ORDER BY d.dead_at, d.id LIMIT ${raw(String(limit + 1))}`,
    );
    const items = rows.slice(0, limit).map((r) => this.toDeadLetter(r));
    const last = items[items.length - 1];
    return {
      items,
      nextCursor:
        rows.length > limit && last ? encodeCursor({ deadAt: last.deadAt, id: last.id }) : null,
    };
  }

  async get(id: string): Promise<DeadLetter | null> {
    if (!isUuid(id)) return null;
    const { ctx } = this;
    const { rows } = await ctx.one(
      sql`SELECT ${this.deadColumns()} FROM ${ctx.DL} d JOIN ${ctx.E} e ON e.seq = d.event_seq WHERE d.id = ${id}`,
    );
    return rows[0] ? this.toDeadLetter(rows[0]) : null;
  }

  /**
   * Reads the matching dead letters in pages of `SUMMARY_PAGE` up the ids (keyset), each row with
   * only its last error, and groups them here: the fingerprint masks numbers and ids with a regular
   * expression no dialect evaluates alike. Memory holds one page and the groups, whatever the count.
   */
  async summarize(filter: DeadLetterFilter): Promise<DeadLetterSummaryRow[]> {
    checkDeadLetterFilter(filter, '');
    const { ctx } = this;
    const d = ctx.dialect;
    const where = this.deadWhere(filter, 'd.');
    const summary = new DeadLetterSummary();
    let after: string | null = null;
    for (;;) {
      const keyset: SqlText = after === null ? EMPTY : sql` AND d.id > ${d.uuid(after)}`;
      const { rows } = await ctx.one(
        sql`SELECT d.id, d.event_type, d.handler, ${d.lastError(raw('d.errors'))} FROM ${ctx.DL} d WHERE ${where}${keyset} ORDER BY d.id LIMIT ${raw(String(SUMMARY_PAGE))}`,
      );
      for (const r of rows) {
        summary.add(String(r.event_type), String(r.handler), {
          name: r.error_name,
          message: r.error_message,
        });
      }
      if (rows.length < SUMMARY_PAGE) return summary.rows();
      after = String(rows[rows.length - 1].id);
    }
  }

  /**
   * Moves dead letters back to the open deliveries, `ID_BATCH` per transaction until none is
   * left: attempts reset, error history kept, the same delivery id and event position (so per-key
   * order puts it before later events of its key).
   */
  async replay(selector: DeadLetterSelector, availableAt?: Date): Promise<number> {
    checkReplay(selector, availableAt);
    const where = this.selectorWhere(selector);
    if (!where) return 0;
    const { ctx } = this;
    const d = ctx.dialect;
    const at = availableAt ? d.time(availableAt) : d.now;
    let total = 0;
    // Batches go up the ids: a delivery this replay moved back that fails again at once is a
    // newer dead letter of the same filter, under the same id, which a later batch would
    // otherwise replay (and count) again — for as long as its handler fails.
    let after: string | null = null;
    for (;;) {
      const from: string | null = after;
      const moved: Row[] = await d.run(
        (): Plan<Row[]> =>
          d.moveRows({
            from: ctx.DL,
            to: ctx.D,
            where: from === null ? where : sql`${where} AND id > ${d.uuid(from)}`,
            limit: ID_BATCH,
            columns: REPLAY_COLUMNS,
            values: sql`id, event_seq, event_type, event_key, handler, 'pending', 0, ${at}, errors, ${d.now}`,
          }),
        d.moveRunOptions,
      );
      total += moved.length;
      if (moved.length < ID_BATCH) return total;
      for (const r of moved) {
        const id = String(r.id);
        if (after === null || id > after) after = id;
      }
    }
  }

  /** Deletes dead letters (and events nothing refers to any more), `ID_BATCH` at a time. */
  async purge(selector: DeadLetterSelector): Promise<number> {
    if (!('ids' in selector)) checkDeadLetterFilter(selector.filter, 'filter.');
    const where = this.selectorWhere(selector);
    if (!where) return 0;
    const { ctx } = this;
    const { DL } = ctx;
    let total = 0;
    for (;;) {
      const { read, purged } = await ctx.dialect.run(
        function* (): Plan<{ read: number; purged: number }> {
          const { rows } =
            yield sql`SELECT id, event_seq FROM ${DL} WHERE ${where} ORDER BY id LIMIT ${raw(String(ID_BATCH))}`;
          if (rows.length === 0) return { read: 0, purged: 0 };
          // The selector is checked again by the delete (a row replayed meanwhile is not here).
          const { affected } = yield sql`DELETE FROM ${DL} WHERE ${ctx.dialect.anyOf(
            raw('id'),
            rows.map((r) => r.id),
            'uuid',
          )} AND ${where}`;
          yield* deleteOrphans(
            ctx,
            rows.map((r) => Number(r.event_seq)),
          );
          return { read: rows.length, purged: affected };
        },
        { transaction: true, deadlockRetries: 3 },
      );
      total += purged;
      if (read < ID_BATCH) return total;
    }
  }
}
