import {
  BadRequestException,
  CanActivate,
  Inject,
  Injectable,
  Logger,
  NotFoundException,
  NotImplementedException,
  OnModuleInit,
  Type,
} from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import {
  DeadLetter,
  DeadLetterFilter,
  DeadLetterSummaryRow,
  DeliveryListState,
  OutboxStore,
  OutboxStoreStats,
} from '../interfaces/outbox-store.interface';
import { OutboxHandlerRegistry } from '../outbox-handler.registry';
import { OUTBOX_STORE } from '../outbox.constants';
import { isUuid } from '../outbox-validation';
import { DeferredOutboxStore } from '../stores/deferred-outbox.store';
import {
  DeadLetterCursor,
  decodeCursor,
  decodeSeqCursor,
  encodeCursor,
  errorFingerprint,
  isMatchAll,
} from '../stores/store-helpers';
import { OutboxAdminThroughput, ThroughputMinute } from './outbox-admin-throughput';
import {
  AdminDeliveryItem,
  AdminEventDelivery,
  AdminEventDetail,
  deliveryItem,
  eventDeliveries,
} from './outbox-admin-views';
import { OutboxAdminOptionsError } from '../errors/outbox-admin-options.error';
import { isAdminDate } from './outbox-admin-dates';
import { ResolvedOutboxAdminOptions } from './outbox-admin-options.interface';
import { OUTBOX_ADMIN_PATH, OUTBOX_ADMIN_RESOLVED_OPTIONS } from './outbox-admin.constants';
import { OutboxAdminMessages } from './outbox-admin.messages';

/** A dead letter in a list: everything but payload and headers, which can be large. */
export type DeadLetterListItem = Omit<DeadLetter, 'payload' | 'headers'>;

export interface DeadLetterListResponse {
  items: DeadLetterListItem[];
  /** Pass as `cursor` for the next page; `null` on the last page. */
  nextCursor: string | null;
}

export interface DeadLetterSummaryResponse {
  groups: DeadLetterSummaryRow[];
  total: number;
}

/**
 * A dead-letter filter of the admin API: the store's conditions, plus conditions on the last
 * error (its name, its message's fingerprint) that the service applies while paging.
 */
export interface AdminDeadLetterFilter extends DeadLetterFilter {
  errorName?: string;
  fingerprint?: string;
}

/** What a bulk request names: the DTO fields, before the "exactly one" and `all` rules. */
export interface BulkSelection {
  ids?: string[];
  filter?: AdminDeadLetterFilter;
  all?: boolean;
}

export interface ListQuery extends AdminDeadLetterFilter {
  limit?: number;
  cursor?: string;
}

export interface DeliveryListResponse {
  items: AdminDeliveryItem[];
  nextCursor: string | null;
}

export interface EventListItem {
  id: string;
  type: string;
  key: string | null;
  occurredAt: Date;
  availableAt: Date;
  handlers: Pick<AdminEventDelivery, 'handler' | 'state' | 'deliveryId' | 'attempt'>[];
}

export interface EventListResponse {
  items: EventListItem[];
  nextCursor: string | null;
}

export interface CatalogResponse {
  types: string[];
  handlers: { name: string; types: string[] }[];
}

export interface ThroughputResponse {
  handlers: {
    handler: string;
    lag: { pending: number; oldestDueAt: Date | null };
    minutes: ThroughputMinute[];
  }[];
}

/** Dead letters one page request reads while filtering by the last error, at most. */
export const ERROR_FILTER_SCAN_BUDGET = 5_000;
/** Dead letters read per store call while filtering by the last error or acting on them. */
const ERROR_FILTER_PAGE = 500;
/** (type, handler) pairs the catalog reads from the store, at most. */
const CATALOG_LIMIT = 1_000;
/** Due deliveries the Redis store reads for the lag, at most. */
const BACKLOG_LIMIT = 10_000;

/**
 * The admin API's logic, separate from HTTP: finds the store and the guards at init, checks the
 * rules the DTOs cannot express, and makes one store call per request.
 */
@Injectable()
export class OutboxAdminService implements OnModuleInit {
  private readonly logger = new Logger('OutboxAdmin');
  private store?: OutboxStore;
  private guardInstances: CanActivate[] = [];

  private registry: OutboxHandlerRegistry | null = null;

  constructor(
    @Inject(OUTBOX_ADMIN_RESOLVED_OPTIONS) readonly options: ResolvedOutboxAdminOptions,
    @Inject(OUTBOX_ADMIN_PATH) private readonly path: string,
    private readonly moduleRef: ModuleRef,
    private readonly throughputs: OutboxAdminThroughput,
  ) {}

  async onModuleInit(): Promise<void> {
    // Looked up across the whole app so this works whether or not OutboxModule is global.
    try {
      this.store = this.moduleRef.get<OutboxStore>(OUTBOX_STORE, { strict: false });
    } catch {
      throw new OutboxAdminOptionsError('store', OutboxAdminMessages.missingOutboxModule());
    }
    try {
      this.registry = this.moduleRef.get(OutboxHandlerRegistry, { strict: false });
    } catch {
      this.registry = null;
    }
    this.guardInstances = await Promise.all(
      this.options.guards.map((guard) => this.resolveGuard(guard)),
    );
    if (this.options.allowUnauthenticated && this.guardInstances.length === 0) {
      this.logger.warn(OutboxAdminMessages.unauthenticated(this.path));
    }
  }

  /** The guards to run, in order, once the module is initialized. */
  get guards(): readonly CanActivate[] {
    return this.guardInstances;
  }

  private async resolveGuard(guard: CanActivate | Type<CanActivate>): Promise<CanActivate> {
    if (typeof guard !== 'function') return guard;
    try {
      // A guard the app already provides keeps its single instance...
      return this.moduleRef.get(guard, { strict: false });
    } catch {
      // ...otherwise it is built here, with its dependencies from this module's imports.
      return this.moduleRef.create(guard);
    }
  }

  private get outboxStore(): OutboxStore {
    if (!this.store)
      throw new OutboxAdminOptionsError('store', OutboxAdminMessages.missingOutboxModule());
    return this.store;
  }

  async list(query: ListQuery): Promise<DeadLetterListResponse> {
    const { limit = this.options.limits.defaultPageSize, cursor, ...filter } = query;
    this.checkLimit(limit);
    if (cursor !== undefined) this.checkCursor(cursor);
    const { store: storeFilter, lastError } = splitFilter(compact(filter));
    const strip = ({ payload: _payload, headers: _headers, ...item }: DeadLetter) => item;
    if (!lastError) {
      const page = await this.outboxStore.listDeadLetters({ ...storeFilter, limit, cursor });
      return { items: page.items.map(strip), nextCursor: page.nextCursor };
    }
    // The last error is matched here, page by page up to a budget; the cursor says where the
    // reading stopped, so a page may come back short (even empty) with a nextCursor.
    const items: DeadLetter[] = [];
    let from = cursor;
    let scanned = 0;
    for (;;) {
      const page = await this.outboxStore.listDeadLetters({
        ...storeFilter,
        limit: ERROR_FILTER_PAGE,
        cursor: from,
      });
      for (const item of page.items) {
        scanned += 1;
        if (lastError(item)) items.push(item);
        if (items.length === limit) {
          return { items: items.map(strip), nextCursor: cursorAt(item) };
        }
      }
      const last = page.items[page.items.length - 1];
      if (!page.nextCursor) return { items: items.map(strip), nextCursor: null };
      if (scanned >= ERROR_FILTER_SCAN_BUDGET) {
        return {
          items: items.map(strip),
          nextCursor: last ? cursorAt(last) : page.nextCursor,
        };
      }
      from = page.nextCursor;
    }
  }

  async get(id: string): Promise<DeadLetter> {
    const deadLetter = await this.outboxStore.getDeadLetter(canonicalId(id));
    if (!deadLetter) throw notFound(id);
    return deadLetter;
  }

  async summary(filter: AdminDeadLetterFilter): Promise<DeadLetterSummaryResponse> {
    const { errorName, fingerprint, ...storeFilter } = compact(filter);
    const groups = (await this.outboxStore.summarizeDeadLetters(storeFilter)).filter(
      (row) =>
        (errorName === undefined || row.errorName === errorName) &&
        (fingerprint === undefined || row.fingerprint === fingerprint),
    );
    return { groups, total: groups.reduce((sum, row) => sum + row.count, 0) };
  }

  async replayOne(id: string, availableAt?: Date): Promise<{ replayed: number }> {
    const replayed = await this.outboxStore.replay({ ids: [canonicalId(id)] }, availableAt);
    if (replayed === 0) throw notFound(id);
    return { replayed };
  }

  async replay(selection: BulkSelection, availableAt?: Date): Promise<{ replayed: number }> {
    const selector = toSelector(selection);
    const replayed = await this.byLastError(selector, (ids) =>
      this.outboxStore.replay({ ids }, availableAt),
    );
    return { replayed: replayed ?? (await this.outboxStore.replay(selector, availableAt)) };
  }

  async purgeOne(id: string): Promise<{ purged: number }> {
    const purged = await this.outboxStore.purge({ ids: [canonicalId(id)] });
    if (purged === 0) throw notFound(id);
    return { purged };
  }

  async purge(selection: BulkSelection): Promise<{ purged: number }> {
    const selector = toSelector(selection);
    const purged = await this.byLastError(selector, (ids) => this.outboxStore.purge({ ids }));
    return { purged: purged ?? (await this.outboxStore.purge(selector)) };
  }

  /**
   * A bulk action on a filter with conditions on the last error: the dead letters are read page
   * by page (bounded memory), those whose last error matches acted on by id. Only dead letters
   * already dead when the action started are read, so one replayed and dead again meanwhile is
   * not acted on twice. `null` when the selector has no such condition (the store does it all).
   */
  private async byLastError(
    selector: AdminSelector,
    act: (ids: string[]) => Promise<number>,
  ): Promise<number | null> {
    if ('ids' in selector) return null;
    const { store: storeFilter, lastError } = splitFilter(selector.filter);
    if (!lastError) return null;
    const started = new Date((await this.outboxStore.now()).getTime() + 1);
    const failedBefore =
      storeFilter.failedBefore && storeFilter.failedBefore < started
        ? storeFilter.failedBefore
        : started;
    let total = 0;
    let cursor: string | undefined;
    for (;;) {
      const page = await this.outboxStore.listDeadLetters({
        ...storeFilter,
        failedBefore,
        limit: ERROR_FILTER_PAGE,
        cursor,
      });
      const ids = page.items.filter(lastError).map((d) => d.id);
      if (ids.length > 0) total += await act(ids);
      if (!page.nextCursor) return total;
      cursor = page.nextCursor;
    }
  }

  stats(): Promise<OutboxStoreStats> {
    return this.outboxStore.stats();
  }

  // ------------------------------------------------------------------ console views

  /** The store itself (a deferred one opened), for its optional views. */
  private async views(): Promise<OutboxStore> {
    const store = this.outboxStore;
    return store instanceof DeferredOutboxStore ? store.open() : store;
  }

  private handlersFor(type?: string): string[] {
    if (!this.registry) return [];
    return type === undefined
      ? this.registry.all().map((h) => h.name)
      : this.registry.handlerNamesFor(type);
  }

  async deliveries(query: {
    state: DeliveryListState;
    type?: string;
    handler?: string;
    limit?: number;
    cursor?: string;
  }): Promise<DeliveryListResponse> {
    const { state, limit = this.options.limits.defaultPageSize, cursor, type, handler } = query;
    this.checkLimit(limit);
    if (cursor !== undefined) this.checkCursor(cursor);
    const store = await this.views();
    if (!store.listDeliveries) throw missingView('listDeliveries');
    const page = await store.listDeliveries({
      state,
      limit,
      cursor,
      ...(type !== undefined ? { type } : {}),
      ...(handler !== undefined ? { handler } : {}),
      handlers: this.handlersFor(),
    });
    const now = await store.now();
    return { items: page.items.map((d) => deliveryItem(d, now)), nextCursor: page.nextCursor };
  }

  async event(id: string): Promise<AdminEventDetail> {
    const store = await this.views();
    if (!store.inspectEvent) throw missingView('inspectEvent');
    const record = await store.inspectEvent(canonicalId(id), this.handlersFor());
    if (!record) throw new NotFoundException(`No event with id ${id}`);
    const now = await store.now();
    return {
      event: record.event,
      deliveries: eventDeliveries(record, this.handlersFor(record.event.type), now),
    };
  }

  async events(query: {
    key: string;
    limit?: number;
    cursor?: string;
  }): Promise<EventListResponse> {
    const { key, limit = this.options.limits.defaultPageSize, cursor } = query;
    this.checkLimit(limit);
    if (cursor !== undefined) {
      try {
        decodeSeqCursor(cursor);
      } catch {
        throw new BadRequestException('cursor must be a nextCursor returned by a previous page');
      }
    }
    const store = await this.views();
    if (!store.listEventsByKey) throw missingView('listEventsByKey');
    const page = await store.listEventsByKey({ key, limit, cursor, handlers: this.handlersFor() });
    const now = await store.now();
    return {
      items: page.items.map((record) => ({
        id: record.event.id,
        type: record.event.type,
        key: record.event.key,
        occurredAt: record.event.occurredAt,
        availableAt: record.event.availableAt,
        handlers: eventDeliveries(record, this.handlersFor(record.event.type), now).map(
          ({ handler, state, deliveryId, attempt }) => ({ handler, state, deliveryId, attempt }),
        ),
      })),
      nextCursor: page.nextCursor,
    };
  }

  /** Types and handlers from this process's registry and from what the store holds. */
  async catalog(): Promise<CatalogResponse> {
    const store = await this.views();
    const stored = store.catalog ? await store.catalog(CATALOG_LIMIT) : { types: [], handlers: [] };
    const byHandler = new Map<string, Set<string>>();
    const types = new Set(stored.types);
    const add = (name: string, handlerTypes: string[]) => {
      const set = byHandler.get(name) ?? new Set<string>();
      for (const t of handlerTypes) {
        set.add(t);
        types.add(t);
      }
      byHandler.set(name, set);
    };
    for (const h of this.registry?.all() ?? []) add(h.name, h.types);
    for (const h of stored.handlers) add(h.name, h.types);
    return {
      types: [...types].sort(),
      handlers: [...byHandler.keys()]
        .sort()
        .map((name) => ({ name, types: [...byHandler.get(name)!].sort() })),
    };
  }

  /**
   * Per handler: its due backlog (from the store) and this process's outcomes over the last
   * hour, by minute (from the event stream).
   */
  async throughput(): Promise<ThroughputResponse> {
    const store = await this.views();
    const backlog = store.backlog ? await store.backlog(BACKLOG_LIMIT) : [];
    const lag = new Map(backlog.map((b) => [b.handler, b]));
    const names = new Set([
      ...this.handlersFor(),
      ...this.throughputs.handlers(),
      ...backlog.map((b) => b.handler).filter((h) => h !== '*'),
    ]);
    return {
      handlers: [...names].sort().map((handler) => ({
        handler,
        lag: {
          pending: lag.get(handler)?.pending ?? 0,
          oldestDueAt: lag.get(handler)?.oldestDueAt ?? null,
        },
        minutes: this.throughputs.minutes(handler),
      })),
    };
  }

  private checkLimit(limit: number): void {
    if (limit > this.options.limits.maxPageSize) {
      throw new BadRequestException(
        `limit must not be greater than ${this.options.limits.maxPageSize}`,
      );
    }
  }

  /**
   * Only a cursor a store could have returned gets through: SQL stores compare its id with a uuid
   * column and its date with a timestamp column, so a forged one ("year 300000") must be a 400
   * here rather than a database error later. Re-encoding must give back the exact text.
   */
  private checkCursor(cursor: string): void {
    let decoded: DeadLetterCursor | undefined;
    try {
      decoded = decodeCursor(cursor);
    } catch {
      decoded = undefined;
    }
    const genuine =
      decoded !== undefined &&
      isUuid(decoded.id) &&
      isAdminDate(decoded.deadAt) &&
      encodeCursor(decoded) === cursor;
    if (!genuine) {
      throw new BadRequestException('cursor must be a nextCursor returned by a previous page');
    }
  }
}

/**
 * Dead-letter ids are UUIDs the stores generate in lower case; PostgreSQL's uuid column matches
 * any case and the text columns of the other stores only the exact one, so ids are lowered here.
 */
function canonicalId(id: string): string {
  return id.toLowerCase();
}

function missingView(method: string): NotImplementedException {
  return new NotImplementedException(
    `this outbox store has no ${method}(); the stores of nestjs-outbox all have it`,
  );
}

function cursorAt(d: DeadLetter): string {
  return encodeCursor({ deadAt: d.deadAt, id: d.id });
}

/** The store's part of a filter, and a test of the last error for the rest (if any). */
function splitFilter(filter: AdminDeadLetterFilter): {
  store: DeadLetterFilter;
  lastError: ((d: DeadLetter) => boolean) | null;
} {
  const { errorName, fingerprint, ...store } = filter;
  if (errorName === undefined && fingerprint === undefined) return { store, lastError: null };
  return {
    store,
    // The same reading of the last error as the summary's (DeadLetterSummary).
    lastError: (d) => {
      const last = d.errors[d.errors.length - 1];
      const name = last?.name == null ? 'Error' : String(last.name);
      const print = errorFingerprint(last?.message == null ? '' : String(last.message));
      return (
        (errorName === undefined || name === errorName) &&
        (fingerprint === undefined || print === fingerprint)
      );
    },
  };
}

function notFound(id: string): NotFoundException {
  return new NotFoundException(`No dead letter with id ${id}`);
}

/**
 * Drops absent fields so `isMatchAll` and the stores see only real criteria. `null` is refused
 * (the DTOs already do): a store could read it as "any" and match everything.
 */
function compact(filter: AdminDeadLetterFilter): AdminDeadLetterFilter {
  const { type, handler, key, failedBefore, failedAfter, errorName, fingerprint } = filter;
  const fields = Object.entries({
    type,
    handler,
    key,
    failedBefore,
    failedAfter,
    errorName,
    fingerprint,
  });
  const nulls = fields.filter(([, v]) => v === null).map(([name]) => name);
  if (nulls.length > 0) {
    throw new BadRequestException(nulls.map((name) => `${name} must not be null`));
  }
  return Object.fromEntries(fields.filter(([, v]) => v !== undefined)) as AdminDeadLetterFilter;
}

/** A selector whose filter may hold conditions on the last error. */
export type AdminSelector = { ids: string[] } | { filter: AdminDeadLetterFilter };

/** Exactly one of ids / filter, and a filter that matches everything only with `all: true`. */
export function toSelector(selection: BulkSelection): AdminSelector {
  const { ids, filter, all } = selection;
  for (const [name, value] of Object.entries({ ids, filter, all })) {
    if (value === null) throw new BadRequestException([`${name} must not be null`]);
  }
  if (ids !== undefined && filter !== undefined) {
    throw new BadRequestException('send either ids or filter, not both');
  }
  if (ids !== undefined) {
    if (all !== undefined) throw new BadRequestException('all applies to a filter, not to ids');
    // Each dead letter once, so the count answered is the number of dead letters moved.
    return { ids: [...new Set(ids.map(canonicalId))] };
  }
  if (filter === undefined) {
    throw new BadRequestException(
      'send ids (dead-letter ids) or a filter; to select every dead letter send { "filter": {}, "all": true }',
    );
  }
  const criteria = compact(filter);
  if (isMatchAll(criteria) && all !== true) {
    throw new BadRequestException(
      'this filter selects every dead letter; confirm with "all": true',
    );
  }
  return { filter: criteria };
}
