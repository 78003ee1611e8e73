import { OutboxValidationError } from '../errors/outbox-validation.error';
import { OutboxHeaders } from '../interfaces/outbox-event.interface';
import {
  DeadLetterFilter,
  DeadLetterSelector,
  DeadLetterSummaryRow,
} from '../interfaces/outbox-store.interface';

/** Largest page any store is asked for: bigger numbers would print as `1e+21` in SQL. */
const PAGE_SIZE_MAX = 2 ** 31 - 1;

/**
 * The page size of a store's list call, read alike by every store: a whole number from 1 up
 * (smaller ones read as 1, larger ones as 2³¹−1); a limit that is no number is refused, naming it.
 */
export function pageSize(limit: unknown): number {
  if (typeof limit !== 'number' || Number.isNaN(limit)) {
    throw new OutboxValidationError(
      'limit',
      `expected a number of items per page, got ${String(limit)}`,
    );
  }
  return Math.min(Math.max(1, Math.floor(limit)), PAGE_SIZE_MAX);
}

/** Refuses a time given to a store call that is not a valid `Date`, naming its field. */
export function checkStoreDate(value: unknown, field: string): void {
  if (value === undefined) return;
  if (!(value instanceof Date) || Number.isNaN(value.getTime())) {
    throw new OutboxValidationError(field, 'expected a valid Date');
  }
}

/** Refuses a dead-letter filter whose times are not valid Dates (`prefix`: `filter.` or ''). */
export function checkDeadLetterFilter(filter: DeadLetterFilter | undefined, prefix: string): void {
  checkStoreDate(filter?.failedBefore, `${prefix}failedBefore`);
  checkStoreDate(filter?.failedAfter, `${prefix}failedAfter`);
}

/** Refuses a replay whose selector or time no store could read alike. */
export function checkReplay(selector: DeadLetterSelector, availableAt: unknown): void {
  checkStoreDate(availableAt, 'availableAt');
  if (!('ids' in selector)) checkDeadLetterFilter(selector.filter, 'filter.');
}

/** JSON with object keys sorted, so equal values serialize equally whatever their key order. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      return Object.fromEntries(
        Object.entries(v as Record<string, unknown>).sort(([a], [b]) =>
          a < b ? -1 : a > b ? 1 : 0,
        ),
      );
    }
    return v;
  });
}

/** What docs/guarantees.md, Guarantees 10 compares when an id is appended again. */
export interface EventContent {
  type: string;
  key: string | null;
  headers: OutboxHeaders;
  payload: unknown;
}

/**
 * Headers that say where an append ran, not what the event is: the W3C trace context the tracing
 * option writes. An id appended again from another request carries another trace, and is still the
 * same event (docs/guarantees.md, Guarantees 10).
 */
const TRACE_CONTEXT_HEADERS = new Set(['traceparent', 'tracestate', 'baggage']);

/** The headers that count as an event's content: all but the trace context. */
export function contentHeaders(headers: OutboxHeaders | undefined): OutboxHeaders {
  const all = headers ?? {};
  let content: OutboxHeaders | null = null;
  for (const name of Object.keys(all)) {
    if (!TRACE_CONTEXT_HEADERS.has(name)) continue;
    content ??= { ...all };
    delete content[name];
  }
  return content ?? all;
}

/** The canonical text of what an append compares (type, key, headers without trace, payload). */
export function eventContentText(e: EventContent): string {
  return canonicalJson([e.type, e.key ?? null, contentHeaders(e.headers), e.payload ?? null]);
}

export function sameEventContent(a: EventContent, b: EventContent): boolean {
  return (
    a.type === b.type &&
    (a.key ?? null) === (b.key ?? null) &&
    canonicalJson(contentHeaders(a.headers)) === canonicalJson(contentHeaders(b.headers)) &&
    canonicalJson(a.payload) === canonicalJson(b.payload)
  );
}

/** Masks ids and numbers so "order 123 not found" and "order 456 not found" group together. */
export function errorFingerprint(message: string): string {
  return message
    .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi, '<id>')
    .replace(/\d+(\.\d+)?/g, '<n>')
    .slice(0, 200);
}

/**
 * The dead-letter summary as stores build it: dead letters are added one at a time (a store reads
 * them in bounded pages), grouped by type, handler, last error name and fingerprint. Memory grows
 * with the number of groups, not of dead letters.
 */
export class DeadLetterSummary {
  private readonly groups = new Map<string, DeadLetterSummaryRow>();

  /** One dead letter; `last` is its last error, absent for an empty history. */
  add(type: string, handler: string, last?: { name?: unknown; message?: unknown } | null): void {
    const errorName = last?.name == null ? 'Error' : String(last.name);
    const fingerprint = errorFingerprint(last?.message == null ? '' : String(last.message));
    const k = JSON.stringify([type, handler, errorName, fingerprint]);
    const group = this.groups.get(k);
    if (group) group.count += 1;
    else this.groups.set(k, { type, handler, errorName, fingerprint, count: 1 });
  }

  /** The groups, largest first. */
  rows(): DeadLetterSummaryRow[] {
    return [...this.groups.values()].sort((a, b) => b.count - a.count);
  }
}

/** Keyset cursor over dead letters ordered by (deadAt, id). */
export interface DeadLetterCursor {
  deadAt: Date;
  id: string;
}

export function encodeCursor(cursor: DeadLetterCursor): string {
  return Buffer.from(`${cursor.deadAt.toISOString()}|${cursor.id}`, 'utf8').toString('base64url');
}

export function decodeCursor(cursor: string): DeadLetterCursor {
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const [at, id] = text.split('|');
  const deadAt = new Date(at ?? '');
  if (!id || Number.isNaN(deadAt.getTime())) {
    throw new OutboxValidationError('cursor', 'is not a cursor returned by a previous page');
  }
  return { deadAt, id };
}

/** Keyset cursor over events by append order (`seq`), newest first: the last seq returned. */
export function encodeSeqCursor(seq: number): string {
  return Buffer.from(`seq|${seq}`, 'utf8').toString('base64url');
}

export function decodeSeqCursor(cursor: string): number {
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const seq = Number(text.startsWith('seq|') ? text.slice(4) : NaN);
  if (!Number.isSafeInteger(seq) || seq < 1 || encodeSeqCursor(seq) !== cursor) {
    throw new OutboxValidationError('cursor', 'is not a cursor returned by a previous page');
  }
  return seq;
}

/** Sorted, de-duplicated types and handler subscriptions from (type, handler) pairs. */
export function catalogOf(pairs: Iterable<[string, string]>): {
  types: string[];
  handlers: { name: string; types: string[] }[];
} {
  const types = new Set<string>();
  const byHandler = new Map<string, Set<string>>();
  for (const [type, handler] of pairs) {
    types.add(type);
    if (handler === '*') continue;
    const set = byHandler.get(handler) ?? new Set<string>();
    set.add(type);
    byHandler.set(handler, set);
  }
  const sorted = (values: Iterable<string>) => [...values].sort();
  return {
    types: sorted(types),
    handlers: sorted(byHandler.keys()).map((name) => ({
      name,
      types: sorted(byHandler.get(name)!),
    })),
  };
}

/** True when a filter has no criteria, i.e. matches every dead letter. */
export function isMatchAll(filter: DeadLetterFilter): boolean {
  return Object.values(filter).every((v) => v === undefined);
}

/** The listeners of `OutboxStore.onAppended`, for stores to hold and call after a commit. */
export class AppendListeners {
  private readonly listeners = new Set<() => void>();

  get size(): number {
    return this.listeners.size;
  }

  /** Adds `listener`; the returned function removes it and then runs `onEmpty` if none remain. */
  add(listener: () => void, onEmpty?: () => void): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
      if (this.listeners.size === 0) onEmpty?.();
    };
  }

  notify(): void {
    for (const listener of this.listeners) listener();
  }
}
