import { createHash, randomUUID } from 'node:crypto';
import { DuplicateEventError } from '../../errors/duplicate-event.error';
import { LeaseLostError } from '../../errors/lease-lost.error';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { OutboxValidationError } from '../../errors/outbox-validation.error';
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
  DeliveryErrorInput,
  DeliveryPage,
  DeliveryPageQuery,
  EventPage,
  EventPageQuery,
  EventRecord,
  HandlerBacklog,
  Lease,
  OutboxStore,
  OutboxStoreStats,
  StoreAppendOptions,
  StoreCatalog,
  TypeStats,
} from '../../interfaces/outbox-store.interface';
import {
  AppendListeners,
  eventContentText,
  decodeCursor,
  encodeCursor,
  DeadLetterSummary,
  checkDeadLetterFilter,
  checkReplay,
  pageSize,
} from '../store-helpers';
import { clientKeyPrefix, quitConnection, RedisClientLike, runScript } from './redis-client';
import { RedisScriptName } from './redis-scripts';
import { ackManyArgs, grouped } from './redis-acks';
import { deadLetterFromRow, decodeClaim, errorArgs } from './redis-codec';
import { CoalescedSignal } from '../wakeups';
import { payloadTextOf } from '../payload-text';
import { RedisWakeups, wakeupConnectionName } from './redis-wakeups';
import { optArg, parseErrors, RedisViews, Row } from './redis-views';

export interface RedisOutboxStoreOptions {
  /** ioredis client (or Cluster). */
  client: RedisClientLike;
  /** Key prefix, used as the `{prefix}` hash tag. @default 'outbox' */
  prefix?: string;
  /** Close the client in `close()`; true only when the library created it. @default false */
  ownsClient?: boolean;
  /**
   * Most unexpanded deliveries per type, due deliveries and expired leases per handler that one
   * claim moves, so one script stays short on a large backlog. @default 500
   */
  claimSweepLimit?: number;
  /** Most dead letters one script examines while filtering (lists, replay, purge). @default 5000 */
  deadLetterScanLimit?: number;
  /**
   * @deprecated Ignored: `summarizeDeadLetters` counts every dead letter, in scripts of bounded
   * size. It used to stop at this many and under-count silently.
   */
  summaryScanLimit?: number;
  /**
   * Most payload and header bytes one append call sends. A larger batch is staged in calls of
   * about this size and committed by one script, all or nothing. @default 8 MiB
   */
  appendChunkBytes?: number;
  /** Called when a wake-up PUBLISH or the subscriber connection fails (logged by the module). */
  onWakeupError?: (error: unknown) => void;
}

/**
 * A duration argument in whole ms, at least `min`. NaN, ±Infinity and negatives (a bad backoff
 * function, say) become `min`: Redis would refuse them as scores or make a lease never expire.
 */
const msArg = (v: number, min: number) => (Number.isFinite(v) && v > min ? Math.round(v) : min);

/** Leases per `ackMany` script call. */
const ACK_MANY_CHUNK = 1000;

/** An interrupted large append leaves its staged payloads for at most this long. */
const APPEND_STAGE_TTL_MS = 10 * 60_000;

/** Dead letters per summary script call (each returned with its error history). */
const SUMMARY_PAGE = 500;

/**
 * One filter condition for `scanDead`: '-' none, '+value' equal to value, '!' nothing matches — a
 * `null` the interface never passes, read as SQL reads `= NULL` rather than as "match all".
 */
const filterArg = (v: string | undefined | null) => (v === null ? '!' : optArg(v));

/**
 * Outbox store on Redis (ioredis). Every state change is one Lua script using Redis `TIME`, so it
 * is atomic in Redis — and only with Redis writes: an append is not part of any SQL transaction.
 * All keys share the `{prefix}` hash tag, so one outbox lives in one Redis Cluster slot.
 */
export class RedisOutboxStore implements OutboxStore {
  private readonly appendListeners = new AppendListeners();
  private readonly client: RedisClientLike;
  private readonly ownsClient: boolean;
  private readonly anchor: string;
  private readonly base: string;
  private readonly sweep: number;
  private readonly scanLimit: number;
  private readonly appendChunkBytes: number;
  private readonly wakeups: RedisWakeups;
  private wakeupSignal: { signal: CoalescedSignal; unwatch: () => void } | null = null;
  private readonly wakeupListeners = new Set<() => Promise<void>>();

  constructor(options: RedisOutboxStoreOptions) {
    const prefix = options.prefix ?? 'outbox';
    if (!prefix || /[{}]/.test(prefix)) {
      throw new OutboxOptionsError(
        'store.prefix',
        'must be a non-empty string without { or } (it becomes the hash tag)',
      );
    }
    this.client = options.client;
    this.ownsClient = options.ownsClient ?? false;
    this.anchor = `{${prefix}}:seq`;
    this.base = `${clientKeyPrefix(options.client)}{${prefix}}:`;
    this.sweep = options.claimSweepLimit ?? 500;
    this.scanLimit = options.deadLetterScanLimit ?? 5000;
    this.appendChunkBytes = options.appendChunkBytes ?? 8 * 1024 * 1024;
    this.wakeups = new RedisWakeups(
      this.client,
      `${this.base}wake`,
      wakeupConnectionName(prefix),
      (error) => options.onWakeupError?.(error),
    );
  }

  private run(name: RedisScriptName, args: (string | number)[]): Promise<unknown> {
    return runScript(this.client, name, [this.anchor], [this.base, ...args]);
  }

  async now(): Promise<Date> {
    return new Date(Number(await this.run('now', [])));
  }

  async append(events: AppendableEvent[], options?: StoreAppendOptions): Promise<OutboxEvent[]> {
    if (options?.manager !== undefined) {
      // Accepting it would suggest the append commits or rolls back with the SQL transaction.
      throw new OutboxValidationError(
        'manager',
        'the redis store cannot join a SQL transaction, so an append would be kept even if that ' +
          'transaction rolls back; append without `manager` (after your commit), or use the typeorm store',
      );
    }
    if (events.length === 0) return [];
    const bodies = events.map((e) => ({
      pl: payloadTextOf(e) ?? JSON.stringify(e.payload ?? null),
      hd: JSON.stringify(e.headers ?? {}),
    }));
    const bytes = bodies.reduce((sum, b) => sum + byteLength(b.pl) + byteLength(b.hd), 0);
    const stage = bytes > this.appendChunkBytes ? await this.stageBodies(bodies) : '';
    const args: (string | number)[] = [stage, events.length];
    events.forEach((e, i) => {
      const content = eventContentText(e);
      args.push(
        e.id,
        e.type,
        optArg(e.key),
        stage ? '' : bodies[i].pl,
        stage ? '' : bodies[i].hd,
        e.occurredAt.getTime(),
        e.availableAt ? e.availableAt.getTime() : '',
        createHash('sha256').update(content).digest('base64'),
        e.handlers.length,
        ...e.handlers,
      );
    });
    let result: Row[] | Row;
    try {
      result = (await this.run('append', args)) as Row[] | Row;
    } catch (error) {
      if (stage) await this.run('appendUnstage', [stage]).catch(() => undefined);
      throw error;
    }
    if (result[0] === 'DUP') throw new DuplicateEventError(String(result[1]));
    if (result[0] === 'STAGE') {
      throw new Error(
        `nestjs-outbox: the staged part of a large append expired before its commit (after ${APPEND_STAGE_TTL_MS} ms); nothing was appended, append again`,
      );
    }
    this.appendListeners.notify();
    return (result as Row[]).map(([oa, av], i) => ({
      id: events[i].id,
      type: events[i].type,
      // The service's validated payload is a parse of the text written, owned by no one else.
      payload:
        payloadTextOf(events[i]) === undefined
          ? structuredClone(events[i].payload)
          : events[i].payload,
      key: events[i].key ?? null,
      headers: { ...events[i].headers },
      occurredAt: new Date(Number(oa)),
      availableAt: new Date(Number(av)),
    }));
  }

  /**
   * Sends the payloads and headers of a batch too large for one call to a stage hash, in calls of
   * at most `appendChunkBytes` (or one event, if larger). Nothing is visible until the append
   * script commits the batch in one step; on failure the stage hash is dropped (or expires).
   */
  private async stageBodies(bodies: { pl: string; hd: string }[]): Promise<string> {
    const stage = randomUUID();
    try {
      let fields: string[] = [];
      let size = 0;
      for (let i = 0; i < bodies.length; i++) {
        const { pl, hd } = bodies[i];
        const more = byteLength(pl) + byteLength(hd);
        if (fields.length > 0 && size + more > this.appendChunkBytes) {
          await this.run('appendStage', [stage, APPEND_STAGE_TTL_MS, ...fields]);
          fields = [];
          size = 0;
        }
        fields.push(`p${i + 1}`, pl, `h${i + 1}`, hd);
        size += more;
      }
      await this.run('appendStage', [stage, APPEND_STAGE_TTL_MS, ...fields]);
    } catch (error) {
      await this.run('appendUnstage', [stage]).catch(() => undefined);
      throw error;
    }
    return stage;
  }

  /** An append is committed when its script returns. */
  onAppended(listener: () => void): () => void {
    return this.appendListeners.add(listener);
  }

  /** After each append, PUBLISH a wake-up (coalesced) for workers in other processes. */
  publishWakeups(): void {
    if (this.wakeupSignal) return;
    const signal = new CoalescedSignal(
      () => this.wakeups.notify(),
      (error) => this.wakeups.reportError(error),
    );
    this.wakeupSignal = { signal, unwatch: this.onAppended(() => signal.signal()) };
  }

  /** Subscribes on a duplicate connection of the client (see `RedisWakeups`). */
  onWakeup(listener: () => void): () => Promise<void> {
    const stop = this.wakeups.listen(listener);
    this.wakeupListeners.add(stop);
    return () => {
      this.wakeupListeners.delete(stop);
      return stop();
    };
  }

  /** The pub/sub channel wake-ups use. */
  get wakeupChannel(): string {
    return this.wakeups.channel;
  }

  private async stopWakeups(): Promise<void> {
    this.wakeupSignal?.signal.close();
    this.wakeupSignal?.unwatch();
    this.wakeupSignal = null;
    await Promise.all([...this.wakeupListeners].map((stop) => stop()));
    this.wakeupListeners.clear();
  }

  async claim(request: ClaimRequest): Promise<ClaimedDelivery[]> {
    const names = [...new Set(request.handlers.map((h) => h.name))];
    const limit = Number.isFinite(request.limit) ? Math.floor(request.limit) : 0;
    if (names.length === 0 || limit <= 0) return [];
    const byType = new Map<string, string[]>();
    for (const h of request.handlers) {
      for (const type of h.types) {
        const list = byType.get(type) ?? [];
        if (!list.includes(h.name)) list.push(h.name);
        byType.set(type, list);
      }
    }
    const token = randomUUID();
    const args: (string | number)[] = [
      request.workerId,
      msArg(Math.ceil(request.leaseMs), 1),
      limit,
      token,
      this.sweep,
      names.length,
      ...names,
      byType.size,
    ];
    for (const [type, handlers] of byType) args.push(type, handlers.length, ...handlers);
    const reply = (await this.run('claim', args)) as [number | string, ...string[]];
    return decodeClaim(reply, names, [...byType.keys()], request.workerId, token);
  }

  private async leased(
    name: RedisScriptName,
    lease: Lease,
    extra: (string | number)[] = [],
  ): Promise<number> {
    const result = Number(
      await this.run(name, [lease.deliveryId, lease.owner, lease.token, ...extra]),
    );
    if (result === 0) throw new LeaseLostError(lease.deliveryId, lease.owner);
    return result;
  }

  async renew(lease: Lease, leaseMs: number): Promise<Lease> {
    const leaseUntil = await this.leased('renew', lease, [msArg(Math.ceil(leaseMs), 1)]);
    return { ...lease, leaseUntil: new Date(leaseUntil) };
  }

  async ack(lease: Lease): Promise<void> {
    await this.leased('ack', lease);
  }

  /**
   * `ack` for many leases: the ack script's logic applied to each lease in turn, on Redis `TIME`,
   * in one script per chunk of leases (a chunk keeps each script short for the other clients).
   * Leases are sent grouped by owner and token (a worker acks its own, and a claim gives all its
   * leases one token), and the script answers with the positions it refused, so neither direction
   * repeats what both sides know.
   */
  async ackMany(leases: Lease[]): Promise<string[]> {
    const acked: string[] = [];
    for (let i = 0; i < leases.length; i += ACK_MANY_CHUNK) {
      const chunk = leases.length <= ACK_MANY_CHUNK ? leases : leases.slice(i, i + ACK_MANY_CHUNK);
      const order = grouped(chunk);
      const args = ackManyArgs(order);
      const refused = (await this.run('ackMany', args)) as (number | string)[];
      if (refused.length === 0) {
        for (const lease of order) acked.push(lease.deliveryId);
        continue;
      }
      const skip = new Set(refused.map(Number));
      order.forEach((lease, k) => {
        if (!skip.has(k + 1)) acked.push(lease.deliveryId);
      });
    }
    return acked;
  }

  async retry(lease: Lease, delayMs: number, error: DeliveryErrorInput): Promise<void> {
    await this.leased('retry', lease, [msArg(delayMs, 0), ...errorArgs(error)]);
  }

  async deadLetter(
    lease: Lease,
    reason: DeadLetterReason,
    error: DeliveryErrorInput,
  ): Promise<void> {
    await this.leased('deadLetter', lease, [reason, ...errorArgs(error)]);
  }

  async release(lease: Lease): Promise<void> {
    await this.leased('release', lease);
  }

  /** The 7 filter arguments of `scanDead` in the scripts, starting after an optional cursor. */
  private filterArgs(
    filter: DeadLetterFilter,
    after: { score: string; id: string } | null,
  ): string[] {
    let start = filter.failedAfter ? filter.failedAfter.getTime() : -Infinity;
    if (after) start = Math.max(start, Number(after.score));
    return [
      Number.isFinite(start) ? String(start) : '-inf',
      filter.failedBefore ? `(${filter.failedBefore.getTime()}` : '+inf',
      after?.score ?? '',
      after?.id ?? '',
      filterArg(filter.type),
      filterArg(filter.handler),
      filterArg(filter.key),
    ];
  }

  async listDeadLetters(query: DeadLetterPageQuery): Promise<DeadLetterPage> {
    const limit = pageSize(query.limit);
    checkDeadLetterFilter(query, '');
    const cursor = query.cursor ? decodeCursor(query.cursor) : null;
    const after = cursor ? { score: String(cursor.deadAt.getTime()), id: cursor.id } : null;
    const [rows, lastS, lastId, exhausted] = (await this.run('deadList', [
      '1',
      ...this.filterArgs(query, after),
      limit + 1,
      this.scanLimit,
    ])) as [Row[], string, string, number];
    const items = rows.slice(0, limit).map(deadLetterFromRow);
    let nextCursor: string | null = null;
    if (rows.length > limit) {
      const last = items[items.length - 1];
      nextCursor = encodeCursor({ deadAt: last.deadAt, id: last.id });
    } else if (!exhausted && lastId) {
      // The scan hit its bound before filling the page: continue from where it stopped.
      nextCursor = encodeCursor({ deadAt: new Date(Number(lastS)), id: lastId });
    }
    return { items, nextCursor };
  }

  async getDeadLetter(id: string): Promise<DeadLetter | null> {
    const [row] = (await this.run('deadGet', [id])) as (Row | null)[];
    return row ? deadLetterFromRow(row) : null;
  }

  /**
   * Counts every matching dead letter: scripts of at most `SUMMARY_PAGE` rows (each examining at
   * most `deadLetterScanLimit`), so neither Redis nor the process holds more than a page at once.
   */
  async summarizeDeadLetters(filter: DeadLetterFilter): Promise<DeadLetterSummaryRow[]> {
    checkDeadLetterFilter(filter, '');
    const summary = new DeadLetterSummary();
    let after: { score: string; id: string } | null = null;
    for (;;) {
      const [rows, lastS, lastId, exhausted] = (await this.run('deadList', [
        '0',
        ...this.filterArgs(filter, after),
        SUMMARY_PAGE,
        this.scanLimit,
      ])) as [Row[], string, string, number];
      for (const [, , handler, type, , , , er] of rows) {
        const errors = parseErrors(er);
        summary.add(String(type), String(handler), errors[errors.length - 1]);
      }
      if (exhausted || !lastId) return summary.rows();
      after = { score: lastS, id: lastId };
    }
  }

  /** Runs a replay or purge script over the selection in bounded batches, each atomic. */
  private async forSelection(
    name: 'replay' | 'purge',
    selector: DeadLetterSelector,
    lead: (string | number)[],
  ): Promise<number> {
    let total = 0;
    if ('ids' in selector) {
      const ids = [...new Set(selector.ids)];
      for (let i = 0; i < ids.length; i += 500) {
        const [count] = (await this.run(name, ['ids', ...lead, ...ids.slice(i, i + 500)])) as Row;
        total += Number(count);
      }
      return total;
    }
    let after: { score: string; id: string } | null = null;
    for (;;) {
      const [count, lastS, lastId, exhausted] = (await this.run(name, [
        'filter',
        ...lead,
        ...this.filterArgs(selector.filter, after),
        500,
        this.scanLimit,
      ])) as Row;
      total += Number(count);
      if (Number(exhausted) === 1 || !lastId) return total;
      after = { score: String(lastS), id: String(lastId) };
    }
  }

  async replay(selector: DeadLetterSelector, availableAt?: Date): Promise<number> {
    checkReplay(selector, availableAt);
    const lead = [availableAt ? availableAt.getTime() : ''];
    if ('ids' in selector) return this.forSelection('replay', selector, lead);
    // Only what was dead when the replay began: a replayed delivery that fails again at once is
    // a newer dead letter, which a later script of this loop would otherwise replay (and count)
    // again, for as long as the handler keeps failing.
    const started = (await this.now()).getTime();
    const { failedBefore } = selector.filter;
    const bound = new Date(
      failedBefore && failedBefore.getTime() <= started ? failedBefore.getTime() : started + 1,
    );
    return this.forSelection(
      'replay',
      { filter: { ...selector.filter, failedBefore: bound } },
      lead,
    );
  }

  async purge(selector: DeadLetterSelector): Promise<number> {
    if (!('ids' in selector)) checkDeadLetterFilter(selector.filter, 'filter.');
    return this.forSelection('purge', selector, []);
  }

  /** The admin views (redis-views.ts). */
  private readonly views = new RedisViews(
    (name, args) => this.run(name, args),
    () => this.scanLimit,
  );

  listDeliveries(query: DeliveryPageQuery): Promise<DeliveryPage> {
    return this.views.listDeliveries(query);
  }

  inspectEvent(id: string, handlers: string[]): Promise<EventRecord | null> {
    return this.views.inspectEvent(id, handlers);
  }

  listEventsByKey(query: EventPageQuery): Promise<EventPage> {
    return this.views.listEventsByKey(query);
  }

  catalog(limit: number): Promise<StoreCatalog> {
    return this.views.catalog(limit);
  }

  backlog(limit: number): Promise<HandlerBacklog[]> {
    return this.views.backlog(limit);
  }

  async stats(): Promise<OutboxStoreStats> {
    const [now, pending, due, oldest, leased, dead, counters] = (await this.run('stats', [])) as [
      number,
      number,
      number,
      string,
      string,
      number,
      string[],
    ];
    const byType: Record<string, TypeStats> = {};
    const field = { p: 'pending', l: 'leased', x: 'dead' } as const;
    for (let i = 0; i < counters.length; i += 2) {
      const name = counters[i];
      const kind = field[name[0] as keyof typeof field];
      if (!kind || name[1] !== ':') continue;
      const t = (byType[name.slice(2)] ??= { pending: 0, leased: 0, dead: 0 });
      t[kind] = Number(counters[i + 1]);
    }
    const oldestAt = oldest === '' ? null : Number(oldest);
    return {
      pending: Number(pending),
      due: Number(due),
      leased: Number(leased),
      dead: Number(dead),
      oldestPendingAgeMs: oldestAt !== null && oldestAt <= Number(now) ? Number(now) - oldestAt : 0,
      byType,
    };
  }

  async cleanup(options: CleanupOptions): Promise<CleanupResult> {
    const [events, deadLetters] = (await this.run('cleanup', [
      Math.max(0, Math.floor(options.deliveredRetentionMs)),
      options.deadLetterRetentionMs === null
        ? ''
        : Math.max(0, Math.floor(options.deadLetterRetentionMs)),
      Math.max(1, Math.floor(options.batchSize)),
    ])) as Row;
    return { events: Number(events), deadLetters: Number(deadLetters) };
  }

  async close(): Promise<void> {
    await this.stopWakeups();
    if (!this.ownsClient) return;
    // Quit once: a later close waits for the first (a second QUIT fails on the closed connection).
    this.quitting ??= quitConnection(this.client);
    await this.quitting;
  }

  private quitting: Promise<void> | null = null;
}

const byteLength = (text: string) => Buffer.byteLength(text, 'utf8');
