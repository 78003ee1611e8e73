import { randomUUID } from 'node:crypto';
import { DuplicateEventError } from '../../errors/duplicate-event.error';
import { LeaseLostError } from '../../errors/lease-lost.error';
import { OUTBOX_ERROR_HISTORY, UNEXPANDED_HANDLER } from '../../outbox.constants';
import { newId } from '../../ids';
import { OutboxEvent } from '../../interfaces/outbox-event.interface';
import {
  AppendableEvent,
  ClaimedDelivery,
  ClaimRequest,
  CleanupOptions,
  CleanupResult,
  DeadLetter,
  DeadLetterFilter,
  DeadLetterPage,
  DeadLetterPageQuery,
  DeadLetterReason,
  DeadLetterSelector,
  DeadLetterSummaryRow,
  DeliveryError,
  DeliveryErrorInput,
  DeliveryPage,
  DeliveryPageQuery,
  DeliveryRecord,
  HandlerBacklog,
  EventPage,
  EventPageQuery,
  EventRecord,
  Lease,
  OutboxStore,
  OutboxStoreStats,
  StoreCatalog,
} from '../../interfaces/outbox-store.interface';
import {
  AppendListeners,
  catalogOf,
  decodeSeqCursor,
  encodeSeqCursor,
  decodeCursor,
  encodeCursor,
  DeadLetterSummary,
  checkDeadLetterFilter,
  checkReplay,
  pageSize,
  sameEventContent,
} from '../store-helpers';

type Status = 'pending' | 'leased' | 'delivered' | 'dead';

interface StoredEvent extends OutboxEvent {
  seq: number;
}

interface StoredDelivery {
  id: string;
  eventId: string;
  seq: number;
  handler: string;
  status: Status;
  attempts: number;
  availableAt: number;
  owner: string | null;
  token: string | null;
  leaseUntil: number;
  errors: DeliveryError[];
  reason: DeadLetterReason | null;
  doneAt: number;
}

export interface MemoryOutboxStoreOptions {
  /** Store clock. @default () => new Date() */
  clock?: () => Date;
}

/**
 * In-process store: the reference implementation of the store contract, for unit tests and
 * single-process experiments. State lives in this process only and is lost on exit.
 */
export class MemoryOutboxStore implements OutboxStore {
  private readonly events = new Map<string, StoredEvent>();
  private readonly deliveries = new Map<string, StoredDelivery>();
  private readonly clock: () => Date;
  private seq = 0;
  private readonly appendListeners = new AppendListeners();

  constructor(options: MemoryOutboxStoreOptions = {}) {
    this.clock = options.clock ?? (() => new Date());
  }

  async now(): Promise<Date> {
    return this.clock();
  }

  private ms(): number {
    return this.clock().getTime();
  }

  async append(events: AppendableEvent[]): Promise<OutboxEvent[]> {
    const now = this.ms();
    const result: OutboxEvent[] = [];
    const fresh = new Map<string, AppendableEvent>();
    // Check every id first so a duplicate anywhere in the batch writes nothing.
    for (const event of events) {
      const existing = this.events.get(event.id) ?? fresh.get(event.id);
      if (existing && !sameEventContent(existing, event)) throw new DuplicateEventError(event.id);
      if (!existing) fresh.set(event.id, event);
    }
    for (const event of events) {
      const existing = this.events.get(event.id);
      if (existing) {
        result.push(publicEvent(existing));
        continue;
      }
      const stored: StoredEvent = {
        id: event.id,
        type: event.type,
        payload: structuredClone(event.payload),
        key: event.key,
        headers: { ...event.headers },
        occurredAt: new Date(event.occurredAt),
        availableAt: new Date(event.availableAt?.getTime() ?? now),
        seq: ++this.seq,
      };
      this.events.set(stored.id, stored);
      const handlers =
        event.handlers.length > 0 ? [...new Set(event.handlers)] : [UNEXPANDED_HANDLER];
      for (const handler of handlers) this.addDelivery(stored, handler);
      result.push(publicEvent(stored));
    }
    if (fresh.size > 0) this.appendListeners.notify();
    return result;
  }

  onAppended(listener: () => void): () => void {
    return this.appendListeners.add(listener);
  }

  private addDelivery(event: StoredEvent, handler: string): void {
    const delivery: StoredDelivery = {
      id: newId(),
      eventId: event.id,
      seq: event.seq,
      handler,
      status: 'pending',
      attempts: 0,
      availableAt: event.availableAt.getTime(),
      owner: null,
      token: null,
      leaseUntil: 0,
      errors: [],
      reason: null,
      doneAt: 0,
    };
    this.deliveries.set(delivery.id, delivery);
  }

  async claim(request: ClaimRequest): Promise<ClaimedDelivery[]> {
    const now = this.ms();
    const handlersByType = new Map<string, string[]>();
    for (const h of request.handlers) {
      for (const type of h.types)
        handlersByType.set(type, [...(handlersByType.get(type) ?? []), h.name]);
    }
    this.expand(handlersByType);
    const names = new Set(request.handlers.map((h) => h.name));
    const ordered = [...this.deliveries.values()]
      .filter((d) => names.has(d.handler) && (d.status === 'pending' || d.status === 'leased'))
      .sort((a, b) => a.seq - b.seq);
    // Only the oldest open delivery per (handler, key) may run: that is per-key order (docs/guarantees.md, Guarantees 6).
    // A key with a delivery running (live lease) takes no other one: a replayed dead letter sits in
    // front of a later delivery claimed while it was dead, and waits for that one's attempt to end.
    const blockedKeys = new Set<string>();
    for (const d of ordered) {
      const key = this.events.get(d.eventId)!.key;
      if (key !== null && d.status === 'leased' && d.leaseUntil > now)
        blockedKeys.add(`${d.handler}\u0000${key}`);
    }
    const claimed: ClaimedDelivery[] = [];
    for (const d of ordered) {
      if (claimed.length >= request.limit) break;
      const event = this.events.get(d.eventId)!;
      if (event.key !== null) {
        const k = `${d.handler}\u0000${event.key}`;
        if (blockedKeys.has(k)) continue;
        blockedKeys.add(k);
      }
      const free = d.status === 'pending' ? d.availableAt <= now : d.leaseUntil <= now;
      if (!free) continue;
      d.status = 'leased';
      d.attempts += 1;
      d.owner = request.workerId;
      d.token = randomUUID();
      d.leaseUntil = now + request.leaseMs;
      claimed.push({
        id: d.id,
        handler: d.handler,
        attempt: d.attempts,
        event: publicEvent(event),
        lease: {
          deliveryId: d.id,
          owner: d.owner,
          token: d.token,
          leaseUntil: new Date(d.leaseUntil),
        },
      });
    }
    return claimed;
  }

  /** Turns unexpanded deliveries of types this worker handles into one delivery per handler. */
  private expand(handlersByType: Map<string, string[]>): void {
    for (const d of [...this.deliveries.values()]) {
      if (d.handler !== UNEXPANDED_HANDLER || d.status !== 'pending') continue;
      const event = this.events.get(d.eventId)!;
      const handlers = handlersByType.get(event.type);
      if (!handlers) continue;
      this.deliveries.delete(d.id);
      for (const handler of handlers) {
        const id = newId();
        this.deliveries.set(id, { ...d, id, handler, errors: [] });
      }
    }
  }

  private owned(lease: Lease): StoredDelivery {
    const d = this.deliveries.get(lease.deliveryId);
    if (
      !d ||
      d.status !== 'leased' ||
      d.owner !== lease.owner ||
      d.token !== lease.token ||
      d.leaseUntil <= this.ms()
    ) {
      throw new LeaseLostError(lease.deliveryId, lease.owner);
    }
    return d;
  }

  async renew(lease: Lease, leaseMs: number): Promise<Lease> {
    const d = this.owned(lease);
    d.leaseUntil = this.ms() + leaseMs;
    return { ...lease, leaseUntil: new Date(d.leaseUntil) };
  }

  async ack(lease: Lease): Promise<void> {
    const d = this.owned(lease);
    this.settle(d, 'delivered');
  }

  async ackMany(leases: Lease[]): Promise<string[]> {
    const acked: string[] = [];
    for (const lease of leases) {
      try {
        this.settle(this.owned(lease), 'delivered');
        acked.push(lease.deliveryId);
      } catch (error) {
        if (!(error instanceof LeaseLostError)) throw error;
      }
    }
    return acked;
  }

  async retry(lease: Lease, delayMs: number, error: DeliveryErrorInput): Promise<void> {
    const d = this.owned(lease);
    this.recordError(d, error);
    this.settle(d, 'pending');
    d.availableAt = this.ms() + Math.max(0, delayMs);
  }

  async deadLetter(
    lease: Lease,
    reason: DeadLetterReason,
    error: DeliveryErrorInput,
  ): Promise<void> {
    const d = this.owned(lease);
    this.recordError(d, error);
    this.settle(d, 'dead');
    d.reason = reason;
  }

  async release(lease: Lease): Promise<void> {
    const d = this.owned(lease);
    this.settle(d, 'pending');
    d.attempts = Math.max(0, d.attempts - 1);
    d.availableAt = this.ms();
  }

  private settle(d: StoredDelivery, status: Status): void {
    d.status = status;
    d.owner = null;
    d.token = null;
    d.leaseUntil = 0;
    d.doneAt = this.ms();
  }

  private recordError(d: StoredDelivery, error: DeliveryErrorInput): void {
    d.errors = [...d.errors, { ...error, at: this.clock() }].slice(-OUTBOX_ERROR_HISTORY);
  }

  private deadLetters(filter: DeadLetterFilter): StoredDelivery[] {
    return [...this.deliveries.values()]
      .filter((d) => {
        if (d.status !== 'dead') return false;
        const e = this.events.get(d.eventId)!;
        return (
          matches(filter.type, e.type) &&
          matches(filter.handler, d.handler) &&
          matches(filter.key, e.key) &&
          (filter.failedBefore === undefined || d.doneAt < filter.failedBefore.getTime()) &&
          (filter.failedAfter === undefined || d.doneAt >= filter.failedAfter.getTime())
        );
      })
      .sort((a, b) => a.doneAt - b.doneAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  private view(d: StoredDelivery): DeadLetter {
    const e = this.events.get(d.eventId)!;
    return {
      id: d.id,
      eventId: e.id,
      type: e.type,
      key: e.key,
      handler: d.handler,
      payload: structuredClone(e.payload),
      headers: { ...e.headers },
      occurredAt: new Date(e.occurredAt),
      attempts: d.attempts,
      reason: d.reason ?? 'exhausted',
      errors: d.errors.map((x) => ({ ...x, at: new Date(x.at) })),
      deadAt: new Date(d.doneAt),
    };
  }

  async listDeadLetters(query: DeadLetterPageQuery): Promise<DeadLetterPage> {
    const limit = pageSize(query.limit);
    checkDeadLetterFilter(query, '');
    const after = query.cursor ? decodeCursor(query.cursor) : null;
    const all = this.deadLetters(query).filter(
      (d) =>
        !after ||
        d.doneAt > after.deadAt.getTime() ||
        (d.doneAt === after.deadAt.getTime() && d.id > after.id),
    );
    const page = all.slice(0, limit);
    const last = page[page.length - 1];
    return {
      items: page.map((d) => this.view(d)),
      nextCursor:
        all.length > page.length && last
          ? encodeCursor({ deadAt: new Date(last.doneAt), id: last.id })
          : null,
    };
  }

  async getDeadLetter(id: string): Promise<DeadLetter | null> {
    const d = this.deliveries.get(id);
    return d && d.status === 'dead' ? this.view(d) : null;
  }

  async summarizeDeadLetters(filter: DeadLetterFilter): Promise<DeadLetterSummaryRow[]> {
    checkDeadLetterFilter(filter, '');
    const summary = new DeadLetterSummary();
    for (const d of this.deadLetters(filter)) {
      summary.add(this.events.get(d.eventId)!.type, d.handler, d.errors[d.errors.length - 1]);
    }
    return summary.rows();
  }

  private select(selector: DeadLetterSelector): StoredDelivery[] {
    if ('ids' in selector) {
      // An id listed twice is one dead letter, counted once (as the SQL and Redis stores do).
      return [...new Set(selector.ids)]
        .map((id) => this.deliveries.get(id))
        .filter((d): d is StoredDelivery => d?.status === 'dead');
    }
    return this.deadLetters(selector.filter);
  }

  async replay(selector: DeadLetterSelector, availableAt?: Date): Promise<number> {
    checkReplay(selector, availableAt);
    const selected = this.select(selector);
    const at = availableAt?.getTime() ?? this.ms();
    for (const d of selected) {
      d.status = 'pending';
      d.attempts = 0;
      d.reason = null;
      d.availableAt = at;
    }
    return selected.length;
  }

  async purge(selector: DeadLetterSelector): Promise<number> {
    if (!('ids' in selector)) checkDeadLetterFilter(selector.filter, 'filter.');
    const selected = this.select(selector);
    for (const d of selected) this.deliveries.delete(d.id);
    this.dropOrphans(new Set(selected.map((d) => d.eventId)));
    return selected.length;
  }

  /** Removes events left with no delivery at all (delivered ones wait for retention). */
  private dropOrphans(eventIds: Set<string>): void {
    for (const d of this.deliveries.values()) eventIds.delete(d.eventId);
    for (const id of eventIds) this.events.delete(id);
  }

  private record(d: StoredDelivery): DeliveryRecord {
    const e = this.events.get(d.eventId)!;
    const leased = d.status === 'leased';
    return {
      id: d.id,
      eventId: e.id,
      type: e.type,
      key: e.key,
      handler: d.handler,
      status: d.status === 'delivered' ? 'pending' : d.status,
      attempts: d.attempts,
      availableAt: new Date(d.availableAt),
      leaseOwner: leased ? d.owner : null,
      leaseUntil: leased ? new Date(d.leaseUntil) : null,
      errors: d.errors.map((x) => ({ ...x, at: new Date(x.at) })),
    };
  }

  async listDeliveries(query: DeliveryPageQuery): Promise<DeliveryPage> {
    const limit = pageSize(query.limit);
    const now = this.ms();
    const after = query.cursor ? decodeCursor(query.cursor) : null;
    const at = (d: StoredDelivery) => (query.state === 'leased' ? d.leaseUntil : d.availableAt);
    const inState = (d: StoredDelivery) =>
      query.state === 'leased'
        ? d.status === 'leased' && d.leaseUntil > now
        : d.status === 'pending' &&
          (query.state === 'retrying' ? d.attempts > 0 : d.attempts === 0 && d.availableAt > now);
    const all = [...this.deliveries.values()]
      .filter((d) => {
        if (!inState(d)) return false;
        const e = this.events.get(d.eventId)!;
        if (!matches(query.type, e.type) || !matches(query.handler, d.handler)) return false;
        if (!after) return true;
        const t = after.deadAt.getTime();
        return at(d) > t || (at(d) === t && d.id > after.id);
      })
      .sort((a, b) => at(a) - at(b) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    const page = all.slice(0, limit);
    const last = page[page.length - 1];
    return {
      items: page.map((d) => this.record(d)),
      nextCursor:
        all.length > page.length && last
          ? encodeCursor({ deadAt: new Date(at(last)), id: last.id })
          : null,
    };
  }

  private eventRecord(e: StoredEvent): EventRecord {
    const deliveries = [...this.deliveries.values()]
      .filter((d) => d.eventId === e.id && d.status !== 'delivered')
      .map((d) => this.record(d));
    return { event: publicEvent(e), deliveries };
  }

  async inspectEvent(id: string): Promise<EventRecord | null> {
    const e = this.events.get(id);
    return e ? this.eventRecord(e) : null;
  }

  async listEventsByKey(query: EventPageQuery): Promise<EventPage> {
    const limit = pageSize(query.limit);
    const before = query.cursor ? decodeSeqCursor(query.cursor) : Infinity;
    const all = [...this.events.values()]
      .filter((e) => e.key === query.key && e.seq < before)
      .sort((a, b) => b.seq - a.seq);
    const page = all.slice(0, limit);
    const last = page[page.length - 1];
    return {
      items: page.map((e) => this.eventRecord(e)),
      nextCursor: all.length > page.length && last ? encodeSeqCursor(last.seq) : null,
    };
  }

  async catalog(limit: number): Promise<StoreCatalog> {
    const pairs = new Map<string, [string, string]>();
    for (const d of this.deliveries.values()) {
      if (pairs.size >= limit) break;
      if (d.status === 'delivered') continue;
      const type = this.events.get(d.eventId)!.type;
      pairs.set(JSON.stringify([type, d.handler]), [type, d.handler]);
    }
    return catalogOf(pairs.values());
  }

  async backlog(): Promise<HandlerBacklog[]> {
    const now = this.ms();
    const by = new Map<string, { pending: number; oldest: number }>();
    for (const d of this.deliveries.values()) {
      if (d.status !== 'pending' || d.availableAt > now) continue;
      const b = by.get(d.handler) ?? { pending: 0, oldest: d.availableAt };
      b.pending += 1;
      b.oldest = Math.min(b.oldest, d.availableAt);
      by.set(d.handler, b);
    }
    return [...by].map(([handler, b]) => ({
      handler,
      pending: b.pending,
      oldestDueAt: new Date(b.oldest),
    }));
  }

  async stats(): Promise<OutboxStoreStats> {
    const now = this.ms();
    const stats: OutboxStoreStats = {
      pending: 0,
      due: 0,
      leased: 0,
      dead: 0,
      oldestPendingAgeMs: 0,
      byType: {},
    };
    for (const d of this.deliveries.values()) {
      if (d.status === 'delivered') continue;
      const type = this.events.get(d.eventId)!.type;
      const t = (stats.byType[type] ??= { pending: 0, leased: 0, dead: 0 });
      if (d.status === 'pending') {
        stats.pending++;
        t.pending++;
        if (d.availableAt <= now) {
          stats.due++;
          stats.oldestPendingAgeMs = Math.max(stats.oldestPendingAgeMs, now - d.availableAt);
        }
      } else if (d.status === 'leased') {
        stats.leased++;
        t.leased++;
      } else {
        stats.dead++;
        t.dead++;
      }
    }
    return stats;
  }

  async cleanup(options: CleanupOptions): Promise<CleanupResult> {
    const now = this.ms();
    const result: CleanupResult = { events: 0, deadLetters: 0 };
    if (options.deadLetterRetentionMs !== null) {
      const cutoff = now - options.deadLetterRetentionMs;
      const old = [...this.deliveries.values()]
        .filter((d) => d.status === 'dead' && d.doneAt < cutoff)
        .slice(0, options.batchSize);
      for (const d of old) this.deliveries.delete(d.id);
      result.deadLetters = old.length;
      this.dropOrphans(new Set(old.map((d) => d.eventId)));
    }
    const cutoff = now - options.deliveredRetentionMs;
    const byEvent = new Map<string, StoredDelivery[]>();
    for (const d of this.deliveries.values())
      byEvent.set(d.eventId, [...(byEvent.get(d.eventId) ?? []), d]);
    for (const [eventId, ds] of byEvent) {
      if (result.events >= options.batchSize) break;
      if (ds.every((d) => d.status === 'delivered' && d.doneAt < cutoff)) {
        for (const d of ds) this.deliveries.delete(d.id);
        this.events.delete(eventId);
        result.events++;
      }
    }
    return result;
  }
}

/** `undefined` is no condition; `null` matches nothing (see `DeadLetterFilter`). */
function matches(wanted: string | null | undefined, actual: string | null): boolean {
  return wanted === undefined || (wanted !== null && actual === wanted);
}

function publicEvent(e: StoredEvent): OutboxEvent {
  return {
    id: e.id,
    type: e.type,
    payload: structuredClone(e.payload),
    key: e.key,
    headers: { ...e.headers },
    occurredAt: new Date(e.occurredAt),
    availableAt: new Date(e.availableAt),
  };
}
