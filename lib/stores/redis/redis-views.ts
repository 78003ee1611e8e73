import type { OutboxHeaders } from '../../interfaces/outbox-event.interface';
import type {
  DeliveryError,
  DeliveryPage,
  DeliveryPageQuery,
  DeliveryRecord,
  EventPage,
  EventPageQuery,
  EventRecord,
  HandlerBacklog,
  StoreCatalog,
} from '../../interfaces/outbox-store.interface';
import {
  catalogOf,
  decodeCursor,
  decodeSeqCursor,
  encodeCursor,
  encodeSeqCursor,
  pageSize,
} from '../store-helpers';
import type { RedisScriptName } from './redis-scripts';

/** A row as the scripts return it. */
export type Row = (string | number | null)[];

/** A script's optional argument: '-' none, '+value' the value. */
export const optArg = (v: string | undefined | null) =>
  v === undefined || v === null ? '-' : `+${v}`;

/**
 * The Redis store's admin views (deliveries by state, an event across handlers, events of a key,
 * the catalog, the backlog): read-only scripts and the decoding of their rows, apart from the
 * store's delivery path.
 */
export class RedisViews {
  constructor(
    private readonly run: (name: RedisScriptName, args: (string | number)[]) => Promise<unknown>,
    private readonly scanLimit: () => number,
  ) {}

  /**
   * Pending deliveries are read from the `pend` set (by due time), leases from each handler's
   * leased set: those of `query.handler`, else of `query.handlers` (the caller's registry).
   */
  async listDeliveries(query: DeliveryPageQuery): Promise<DeliveryPage> {
    const cursor = query.cursor ? decodeCursor(query.cursor) : null;
    const limit = pageSize(query.limit);
    const handlers =
      query.handler !== undefined ? [query.handler] : [...new Set(query.handlers ?? [])];
    const [rows, lastS, lastId, exhausted] = (await this.run('deliveriesList', [
      query.state,
      optArg(query.type),
      optArg(query.handler),
      cursor ? String(cursor.deadAt.getTime()) : '',
      cursor?.id ?? '',
      limit + 1,
      this.scanLimit(),
      ...(query.state === 'leased' ? handlers : []),
    ])) as [[Row, string][], string, string, number];
    const items = rows.slice(0, limit).map(([row]) => deliveryFromRow(row));
    let nextCursor: string | null = null;
    if (rows.length > limit) {
      const last = rows[limit - 1];
      nextCursor = encodeCursor({ deadAt: new Date(Number(last[1])), id: String(last[0][0]) });
    } else if (!exhausted && lastId) {
      // The scan hit its bound before filling the page: continue from where it stopped.
      nextCursor = encodeCursor({ deadAt: new Date(Number(lastS)), id: lastId });
    }
    return { items, nextCursor };
  }

  /**
   * Delivery ids are derived from event and handler, so the deliveries of an event are found by
   * the handler names given (the caller's registry) and the unexpanded one.
   */
  async inspectEvent(id: string, handlers: string[]): Promise<EventRecord | null> {
    const [event, deliveries] = (await this.run('eventView', [id, ...new Set(handlers)])) as [
      Row | null,
      Row[]?,
    ];
    return event ? eventRecordFromRow(event, deliveries ?? []) : null;
  }

  async listEventsByKey(query: EventPageQuery): Promise<EventPage> {
    const before = query.cursor ? decodeSeqCursor(query.cursor) : null;
    const limit = pageSize(query.limit);
    const rows = (await this.run('eventsByKey', [
      query.key,
      before === null ? '' : String(before),
      limit + 1,
      ...new Set(query.handlers ?? []),
    ])) as [Row, Row[]][];
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    return {
      items: page.map(([event, deliveries]) => eventRecordFromRow(event, deliveries)),
      nextCursor: rows.length > limit && last ? encodeSeqCursor(Number(last[0][7])) : null,
    };
  }

  /** Types from the counters; handlers from the first `limit` pending and dead deliveries. */
  async catalog(limit: number): Promise<StoreCatalog> {
    const [types, flat] = (await this.run('catalog', [Math.max(1, Math.floor(limit))])) as [
      string[],
      string[],
    ];
    const pairs: [string, string][] = types.map((t) => [String(t), '*']);
    for (let i = 0; i + 1 < flat.length; i += 2) pairs.push([String(flat[i]), String(flat[i + 1])]);
    return catalogOf(pairs);
  }

  /** From the `pend` set: at most `limit` due deliveries, oldest first. */
  async backlog(limit: number): Promise<HandlerBacklog[]> {
    const flat = (await this.run('backlog', [Math.max(1, Math.floor(limit))])) as (
      string | number
    )[];
    const out: HandlerBacklog[] = [];
    for (let i = 0; i + 2 < flat.length; i += 3) {
      out.push({
        handler: String(flat[i]),
        pending: Number(flat[i + 1]),
        oldestDueAt: new Date(Number(flat[i + 2])),
      });
    }
    return out;
  }
}

/** Headers as stored (JSON); most events have none, so `{}` skips the parser. */
export function parseHeaders(raw: unknown): OutboxHeaders {
  const text = String(raw);
  return text === '{}' ? {} : (JSON.parse(text) as OutboxHeaders);
}

interface StoredError {
  j?: number;
  name: string;
  message: string;
  /** JSON text of the stack (always encoded: written only by versions that set `j`). */
  stack?: string;
  attempt: number;
  workerId: string;
  at: string;
}

export function parseErrors(raw: unknown): DeliveryError[] {
  if (raw === null || raw === undefined || raw === '') return [];
  const parsed = JSON.parse(String(raw)) as StoredError[] | Record<string, never>;
  // Lua's cjson writes an empty table as {}.
  const list = Array.isArray(parsed) ? parsed : [];
  const text = (v: string, encoded: boolean) => (encoded ? (JSON.parse(v) as string) : v);
  return list.map((e) => ({
    name: text(e.name, e.j === 1),
    message: text(e.message, e.j === 1),
    ...(typeof e.stack === 'string' ? { stack: JSON.parse(e.stack) as string } : {}),
    attempt: Number(e.attempt),
    workerId: text(e.workerId, e.j === 1),
    at: new Date(Number(e.at)),
  }));
}

/** A delivery as `record()` returns it (delivery-view.lua). */
function deliveryFromRow(row: Row): DeliveryRecord {
  const [id, eventId, handler, type, key, st, at, av, owner, leaseUntil, er, deadAt] = row;
  const status = st === 'l' ? 'leased' : st === 'x' ? 'dead' : 'pending';
  return {
    id: String(id),
    eventId: String(eventId),
    type: String(type),
    key: key === null || key === undefined ? null : String(key),
    handler: String(handler),
    status,
    attempts: Number(at ?? 0),
    availableAt: new Date(Number(status === 'dead' ? deadAt : av)),
    leaseOwner: status === 'leased' && owner != null ? String(owner) : null,
    leaseUntil: status === 'leased' && leaseUntil != null ? new Date(Number(leaseUntil)) : null,
    errors: parseErrors(er),
  };
}

/** An event as `eventRow()` returns it, with its deliveries. */
function eventRecordFromRow(row: Row, deliveries: Row[] | Record<string, never>): EventRecord {
  const [id, type, key, pl, hd, oa, av] = row;
  return {
    event: {
      id: String(id),
      type: String(type),
      key: key === null || key === undefined ? null : String(key),
      payload: JSON.parse(String(pl)),
      headers: parseHeaders(hd),
      occurredAt: new Date(Number(oa)),
      availableAt: new Date(Number(av)),
    },
    // An empty Lua table comes back as an empty array from redis; guard a non-array anyway.
    deliveries: Array.isArray(deliveries) ? deliveries.map(deliveryFromRow) : [],
  };
}
