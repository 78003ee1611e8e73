import {
  BadRequestException,
  CanActivate,
  Inject,
  Injectable,
  Logger,
  NotFoundException,
  OnModuleInit,
  Type,
} from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import {
  DeadLetter,
  DeadLetterFilter,
  DeadLetterSelector,
  DeadLetterSummaryRow,
  OutboxStore,
  OutboxStoreStats,
} from '../interfaces/outbox-store.interface';
import { OUTBOX_STORE } from '../outbox.constants';
import { isUuid } from '../outbox-validation';
import { DeadLetterCursor, decodeCursor, encodeCursor, isMatchAll } from '../stores/store-helpers';
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

/** What a bulk request names: the DTO fields, before the "exactly one" and `all` rules. */
export interface BulkSelection {
  ids?: string[];
  filter?: DeadLetterFilter;
  all?: boolean;
}

export interface ListQuery extends DeadLetterFilter {
  limit?: number;
  cursor?: string;
}

/**
 * The admin API's logic, separate from HTTP: finds the store and the guards at init, checks the
 * rules the DTOs cannot express, and makes one store call per request.
 */
@Injectable()
export class OutboxAdminService implements OnModuleInit {
  private readonly logger = new Logger('OutboxAdmin');
  private store?: OutboxStore;
  private guardInstances: CanActivate[] = [];

  constructor(
    @Inject(OUTBOX_ADMIN_RESOLVED_OPTIONS) readonly options: ResolvedOutboxAdminOptions,
    @Inject(OUTBOX_ADMIN_PATH) private readonly path: string,
    private readonly moduleRef: ModuleRef,
  ) {}

  async onModuleInit(): Promise<void> {
    // Looked up across the whole app so this works whether or not OutboxModule is global.
    try {
      this.store = this.moduleRef.get<OutboxStore>(OUTBOX_STORE, { strict: false });
    } catch {
      throw new OutboxAdminOptionsError('store', OutboxAdminMessages.missingOutboxModule());
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
    if (limit > this.options.limits.maxPageSize) {
      throw new BadRequestException(
        `limit must not be greater than ${this.options.limits.maxPageSize}`,
      );
    }
    if (cursor !== undefined) this.checkCursor(cursor);
    const page = await this.outboxStore.listDeadLetters({ ...compact(filter), limit, cursor });
    return {
      items: page.items.map(({ payload: _payload, headers: _headers, ...item }) => item),
      nextCursor: page.nextCursor,
    };
  }

  async get(id: string): Promise<DeadLetter> {
    const deadLetter = await this.outboxStore.getDeadLetter(canonicalId(id));
    if (!deadLetter) throw notFound(id);
    return deadLetter;
  }

  async summary(filter: DeadLetterFilter): Promise<DeadLetterSummaryResponse> {
    const groups = await this.outboxStore.summarizeDeadLetters(compact(filter));
    return { groups, total: groups.reduce((sum, row) => sum + row.count, 0) };
  }

  async replayOne(id: string, availableAt?: Date): Promise<{ replayed: number }> {
    const replayed = await this.outboxStore.replay({ ids: [canonicalId(id)] }, availableAt);
    if (replayed === 0) throw notFound(id);
    return { replayed };
  }

  async replay(selection: BulkSelection, availableAt?: Date): Promise<{ replayed: number }> {
    const selector = toSelector(selection);
    return { replayed: await this.outboxStore.replay(selector, availableAt) };
  }

  async purgeOne(id: string): Promise<{ purged: number }> {
    const purged = await this.outboxStore.purge({ ids: [canonicalId(id)] });
    if (purged === 0) throw notFound(id);
    return { purged };
  }

  async purge(selection: BulkSelection): Promise<{ purged: number }> {
    const selector = toSelector(selection);
    return { purged: await this.outboxStore.purge(selector) };
  }

  stats(): Promise<OutboxStoreStats> {
    return this.outboxStore.stats();
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

function notFound(id: string): NotFoundException {
  return new NotFoundException(`No dead letter with id ${id}`);
}

/**
 * Drops absent fields so `isMatchAll` and the stores see only real criteria. `null` is refused
 * (the DTOs already do): a store could read it as "any" and match everything.
 */
function compact(filter: DeadLetterFilter): DeadLetterFilter {
  const { type, handler, key, failedBefore, failedAfter } = filter;
  const fields = Object.entries({ type, handler, key, failedBefore, failedAfter });
  const nulls = fields.filter(([, v]) => v === null).map(([name]) => name);
  if (nulls.length > 0) {
    throw new BadRequestException(nulls.map((name) => `${name} must not be null`));
  }
  return Object.fromEntries(fields.filter(([, v]) => v !== undefined)) as DeadLetterFilter;
}

/** Exactly one of ids / filter, and a filter that matches everything only with `all: true`. */
export function toSelector(selection: BulkSelection): DeadLetterSelector {
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
