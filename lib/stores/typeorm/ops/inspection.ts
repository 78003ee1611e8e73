import { OutboxValidationError } from '../../../errors/outbox-validation.error';
import {
  DeliveryPage,
  DeliveryPageQuery,
  DeliveryRecord,
  EventPage,
  EventPageQuery,
  EventRecord,
  HandlerBacklog,
  StoreCatalog,
} from '../../../interfaces/outbox-store.interface';
import { isUuid } from '../../../outbox-validation';
import {
  catalogOf,
  decodeCursor,
  decodeSeqCursor,
  encodeCursor,
  encodeSeqCursor,
  pageSize,
} from '../../store-helpers';
import { Row } from '../dialects/sql-dialect';
import { EMPTY, join, raw, sql, SqlText } from '../sql';
import { parseErrors, StoreContext } from './context';
import { textEquals } from './dead-letters';

/**
 * The admin API's read-only views: open deliveries by state, one event with its deliveries, the
 * events of a key, the catalog of types and handlers. Plain SELECTs of fixed text over the same
 * tables as the other operations, each bounded by a LIMIT.
 */
export class InspectionOps {
  constructor(private readonly ctx: StoreContext) {}

  /** Select list of an open delivery under alias `d`, in the shape `openRecord` reads. */
  private openColumns(): SqlText {
    const d = this.ctx.dialect;
    return sql`d.id, d.event_seq, d.event_type, d.event_key, d.handler, d.status, d.attempts, ${d.timeOut(raw('d.available_at'))} AS available_at, d.lease_owner, ${d.timeOut(raw('d.lease_until'))} AS lease_until, ${d.jsonOut(raw('d.errors'))} AS errors`;
  }

  private openRecord(r: Row, eventId: string): DeliveryRecord {
    const d = this.ctx.dialect;
    const leased = r.status === 'leased';
    return {
      id: String(r.id).toLowerCase(),
      eventId,
      type: String(r.event_type),
      key: r.event_key === null || r.event_key === undefined ? null : String(r.event_key),
      handler: String(r.handler),
      status: leased ? 'leased' : 'pending',
      attempts: Number(r.attempts),
      availableAt: d.readTime(r.available_at),
      leaseOwner: leased && r.lease_owner != null ? String(r.lease_owner) : null,
      leaseUntil: leased && r.lease_until != null ? d.readTime(r.lease_until) : null,
      errors: parseErrors(r.errors),
    };
  }

  private deadRecord(r: Row, eventId: string): DeliveryRecord {
    return {
      id: String(r.id).toLowerCase(),
      eventId,
      type: String(r.event_type),
      key: r.event_key === null || r.event_key === undefined ? null : String(r.event_key),
      handler: String(r.handler),
      status: 'dead',
      attempts: Number(r.attempts),
      availableAt: this.ctx.dialect.readTime(r.dead_at),
      leaseOwner: null,
      leaseUntil: null,
      errors: parseErrors(r.errors),
    };
  }

  async listDeliveries(query: DeliveryPageQuery): Promise<DeliveryPage> {
    const { ctx } = this;
    const d = ctx.dialect;
    const limit = pageSize(query.limit);
    const after = query.cursor ? decodeCursor(query.cursor) : null;
    if (after && !isUuid(after.id))
      throw new OutboxValidationError('cursor', 'is not a cursor returned by a previous page');
    const order = raw(query.state === 'leased' ? 'd.lease_until' : 'd.available_at');
    const conds: SqlText[] = [
      query.state === 'leased'
        ? sql`d.status = 'leased' AND d.lease_until > ${d.now}`
        : query.state === 'retrying'
          ? sql`d.status = 'pending' AND d.attempts > 0`
          : sql`d.status = 'pending' AND d.attempts = 0 AND d.available_at > ${d.now}`,
    ];
    if (query.type !== undefined) conds.push(textEquals(raw('d.event_type'), query.type));
    if (query.handler !== undefined) conds.push(textEquals(raw('d.handler'), query.handler));
    if (after) {
      const t = d.time(after.deadAt);
      conds.push(sql`(${order} > ${t} OR (${order} = ${t} AND d.id > ${after.id}))`);
    }
    const { rows } = await ctx.one(
      sql`SELECT ${this.openColumns()}, e.id AS event_id FROM ${ctx.D} d JOIN ${ctx.E} e ON e.seq = d.event_seq WHERE ${join(conds, ' AND ')} ORDER BY ${order}, d.id LIMIT ${raw(String(limit + 1))}`,
    );
    const items = rows.slice(0, limit).map((r) => this.openRecord(r, String(r.event_id)));
    const last = items[items.length - 1];
    const at = last && (query.state === 'leased' ? last.leaseUntil : last.availableAt);
    return {
      items,
      nextCursor:
        rows.length > limit && last && at ? encodeCursor({ deadAt: at, id: last.id }) : null,
    };
  }

  /** The deliveries and dead letters of events, by event seq. */
  private async deliveriesOf(events: Map<number, string>): Promise<Map<number, DeliveryRecord[]>> {
    const { ctx } = this;
    const d = ctx.dialect;
    const out = new Map<number, DeliveryRecord[]>([...events.keys()].map((s) => [s, []]));
    if (events.size === 0) return out;
    const seqs = [...events.keys()];
    const open = await ctx.one(
      sql`SELECT ${this.openColumns()} FROM ${ctx.D} d WHERE ${d.anyOf(raw('d.event_seq'), seqs, 'bigint')} ORDER BY d.handler`,
    );
    for (const r of open.rows) {
      const seq = Number(r.event_seq);
      out.get(seq)?.push(this.openRecord(r, events.get(seq)!));
    }
    const dead = await ctx.one(
      sql`SELECT d.id, d.event_seq, d.event_type, d.event_key, d.handler, d.attempts, ${d.jsonOut(raw('d.errors'))} AS errors, ${d.timeOut(raw('d.dead_at'))} AS dead_at FROM ${ctx.DL} d WHERE ${d.anyOf(raw('d.event_seq'), seqs, 'bigint')} ORDER BY d.handler`,
    );
    for (const r of dead.rows) {
      const seq = Number(r.event_seq);
      out.get(seq)?.push(this.deadRecord(r, events.get(seq)!));
    }
    return out;
  }

  async inspectEvent(id: string): Promise<EventRecord | null> {
    if (!isUuid(id)) return null;
    const { ctx } = this;
    const { rows } = await ctx.one(
      sql`SELECT e.seq, ${ctx.eventColumns('e')} FROM ${ctx.E} e WHERE e.id = ${id.toLowerCase()}`,
    );
    if (!rows[0]) return null;
    const event = ctx.toEvent(rows[0]);
    const seq = Number(rows[0].seq);
    const deliveries = await this.deliveriesOf(new Map([[seq, event.id]]));
    return { event, deliveries: deliveries.get(seq) ?? [] };
  }

  /**
   * Events of one key, newest first. The events table has no index on the key: this walks it
   * from the newest row until `limit` match (docs/admin.md, Events).
   */
  async listEventsByKey(query: EventPageQuery): Promise<EventPage> {
    const { ctx } = this;
    const limit = pageSize(query.limit);
    const before = query.cursor ? decodeSeqCursor(query.cursor) : null;
    const keyset = before === null ? EMPTY : sql` AND e.seq < ${before}`;
    const { rows } = await ctx.one(
      sql`SELECT e.seq, ${ctx.eventColumns('e')} FROM ${ctx.E} e WHERE ${textEquals(raw('e.event_key'), query.key)}${keyset} ORDER BY e.seq DESC LIMIT ${raw(String(limit + 1))}`,
    );
    const page = rows.slice(0, limit).map((r) => ({ seq: Number(r.seq), event: ctx.toEvent(r) }));
    const deliveries = await this.deliveriesOf(new Map(page.map((p) => [p.seq, p.event.id])));
    const last = page[page.length - 1];
    return {
      items: page.map((p) => ({ event: p.event, deliveries: deliveries.get(p.seq) ?? [] })),
      nextCursor: rows.length > limit && last ? encodeSeqCursor(last.seq) : null,
    };
  }

  async catalog(limit: number): Promise<StoreCatalog> {
    const { ctx } = this;
    const n = raw(String(Math.max(1, Math.floor(limit))));
    const open = await ctx.one(
      sql`SELECT DISTINCT event_type, handler FROM ${ctx.D} ORDER BY event_type, handler LIMIT ${n}`,
    );
    const dead = await ctx.one(
      sql`SELECT DISTINCT event_type, handler FROM ${ctx.DL} ORDER BY event_type, handler LIMIT ${n}`,
    );
    const pairs = [...open.rows, ...dead.rows].map(
      (r) => [String(r.event_type), String(r.handler)] as [string, string],
    );
    return catalogOf(pairs);
  }

  async backlog(): Promise<HandlerBacklog[]> {
    const { ctx } = this;
    const d = ctx.dialect;
    const { rows } = await ctx.one(
      sql`SELECT handler, COUNT(*) AS pending, ${d.timeOut(raw('MIN(available_at)'))} AS oldest FROM ${ctx.D} WHERE status = 'pending' AND available_at <= ${d.now} GROUP BY handler`,
    );
    return rows.map((r) => ({
      handler: String(r.handler),
      pending: Number(r.pending),
      oldestDueAt: r.oldest == null ? null : d.readTime(r.oldest),
    }));
  }
}
