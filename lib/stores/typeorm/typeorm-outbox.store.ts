import { randomUUID } from 'node:crypto';
import type { DataSource, QueryRunner } from 'typeorm';
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
  DeliveryError,
  DeliveryErrorInput,
  Lease,
  OutboxStore,
  OutboxStoreStats,
  StoreAppendOptions,
} from '../../interfaces/outbox-store.interface';
import { OUTBOX_ERROR_HISTORY, UNEXPANDED_HANDLER } from '../../outbox.constants';
import { isUuid } from '../../outbox-validation';
import {
  AppendListeners,
  decodeCursor,
  encodeCursor,
  errorFingerprint,
  sameEventContent,
} from '../store-helpers';
import { createDialect } from './dialects';
import {
  ClaimCandidates,
  EventInsert,
  Plan,
  Row,
  SqlDialect,
  StatementResult,
} from './dialects/sql-dialect';
import { EMPTY, join, list, raw, sql, SqlText } from './sql';
import { OutboxTableOptions } from './typeorm-outbox.tables';
import { ensureOutboxSchema } from './typeorm-outbox.schema';

export interface TypeOrmOutboxStoreOptions extends OutboxTableOptions {
  /** Longest error message stored per failure, in characters. @default 4096 */
  errorMaxLength?: number;
  /** `init()` creates missing tables (see `ensureOutboxSchema`). @default false */
  ensureSchema?: boolean;
}

/** Unexpanded deliveries turned into per-handler ones per claim, at most. */
const EXPAND_BATCH = 500;
/**
 * After a probe finds no unexpanded delivery, claims skip the probe this long (a round trip
 * saved per claim). Order stays safe meanwhile: placeholders still hold their keys in the claim
 * itself; only the first delivery of a type this process cannot name waits up to this long.
 */
const EXPAND_PROBE_QUIET_MS = 1_000;
/** Delivery rows per INSERT; keeps every dialect under its bound-parameter limit. */
const DELIVERY_ROWS_PER_INSERT = 2000;
const EVENTS_PER_INSERT = 1000;
/**
 * Leases per `ackMany` statement: 4 bound parameters each (plus one), far below every dialect's
 * limit (SQLite 32,766, PostgreSQL 65,535) and a statement each database plans quickly.
 */
const ACK_MANY_CHUNK = 500;

/** What `ack` sets on a delivery (besides clearing the lease): shared with `ackMany`. */
const ACKED = (d: SqlDialect): SqlText => sql`status = 'delivered', done_at = ${d.now}`;

/**
 * Outbox store over a TypeORM `DataSource` on PostgreSQL, MySQL/MariaDB or SQLite. Appends can
 * join the caller's transaction; every other operation is one short statement or transaction,
 * so no connection or transaction is held while a handler runs.
 */
export class TypeOrmOutboxStore implements OutboxStore {
  private expandQuietUntil = 0;
  private readonly appendListeners = new AppendListeners();
  /** Caller transactions holding appends, and whether those include placeholders. */
  private readonly awaitingCommit = new WeakMap<QueryRunner, boolean>();
  private commitHook: object | null = null;

  private readonly dialect: SqlDialect;
  private readonly errorMaxLength: number;
  private initialized?: Promise<void>;

  constructor(
    readonly dataSource: DataSource,
    private readonly options: TypeOrmOutboxStoreOptions = {},
  ) {
    this.dialect = createDialect(dataSource, options);
    this.errorMaxLength = options.errorMaxLength ?? 4096;
  }

  /** Which SQL dialect the DataSource selected. */
  get dialectName(): 'postgres' | 'mysql' | 'sqlite' {
    return this.dialect.name;
  }

  init(): Promise<void> {
    this.initialized ??= this.options.ensureSchema
      ? ensureOutboxSchema(this.dataSource, this.options)
      : Promise.resolve();
    return this.initialized;
  }

  /** Creates the outbox tables if missing (safe when several replicas call it at once). */
  ensureSchema(): Promise<void> {
    return ensureOutboxSchema(this.dataSource, this.options);
  }

  private get E(): SqlText {
    return this.dialect.tables.events;
  }

  private get D(): SqlText {
    return this.dialect.tables.deliveries;
  }

  private one<T = StatementResult>(stmt: SqlText, map?: (r: StatementResult) => T): Promise<T> {
    return this.dialect.run(function* (): Plan<T> {
      const result = yield stmt;
      return map ? map(result) : (result as T);
    });
  }

  async now(): Promise<Date> {
    const { rows } = await this.one(sql`SELECT ${this.dialect.timeOut(this.dialect.now)} AS now`);
    return this.dialect.readTime(rows[0]?.now);
  }

  // ---------------------------------------------------------------- append

  async append(
    events: AppendableEvent[],
    options: StoreAppendOptions = {},
  ): Promise<OutboxEvent[]> {
    // This process wrote a placeholder: the next claim must look for it at once.
    if (events.some((e) => e.handlers.length === 0)) this.expandQuietUntil = 0;
    const runner =
      options.manager === undefined || options.manager === null
        ? null
        : this.transactionOf(options.manager);
    if (events.length === 0) return [];
    const batch = dedupeBatch(events);
    const plan = () => this.appendPlan(batch);
    const attempt = () =>
      runner
        ? this.dialect.runInTransaction(runner, plan)
        : this.dialect.run(plan, { transaction: true });
    let stored: OutboxEvent[];
    try {
      stored = orderLike(events, await attempt());
    } catch (error) {
      // Another transaction inserted one of these ids between our check and our insert; the
      // second pass sees it and compares contents (SPEC §2.10).
      if (!this.dialect.isUniqueViolation(error)) throw error;
      stored = orderLike(events, await attempt());
    }
    const placeholders = events.some((e) => e.handlers.length === 0);
    if (runner && this.commitHook) {
      // Our own transaction has committed; the caller's tells us when it does (see onAppended).
      this.awaitingCommit.set(runner, placeholders || this.awaitingCommit.get(runner) === true);
    } else if (!runner) {
      this.appended(placeholders);
    }
    return stored;
  }

  /** Appends are committed: wake listeners, and look for new placeholders on the next claim. */
  private appended(placeholders: boolean): void {
    // A claim that ran while they were uncommitted may have started a quiet period.
    if (placeholders) this.expandQuietUntil = 0;
    this.appendListeners.notify();
  }

  /**
   * Listeners hear of appends once they are committed: at once for the store's own transaction,
   * and through a TypeORM subscriber (`afterTransactionCommit`) for the caller's.
   */
  onAppended(listener: () => void): () => void {
    if (!this.commitHook) {
      this.commitHook = {
        afterTransactionCommit: (event: { queryRunner?: QueryRunner }) => {
          const runner = event.queryRunner;
          // A released savepoint also reports a commit; only the outermost one counts.
          if (!runner || runner.isTransactionActive || !this.awaitingCommit.has(runner)) return;
          const placeholders = this.awaitingCommit.get(runner) === true;
          this.awaitingCommit.delete(runner);
          this.appended(placeholders);
        },
        afterTransactionRollback: (event: { queryRunner?: QueryRunner }) => {
          if (event.queryRunner && !event.queryRunner.isTransactionActive) {
            this.awaitingCommit.delete(event.queryRunner);
          }
        },
      };
      this.dataSource.subscribers.push(this.commitHook as never);
    }
    // The DataSource may outlive this store (tests, several apps): leave nothing behind on it.
    return this.appendListeners.add(listener, () => {
      const index = this.commitHook
        ? this.dataSource.subscribers.indexOf(this.commitHook as never)
        : -1;
      if (index >= 0) this.dataSource.subscribers.splice(index, 1);
      this.commitHook = null;
    });
  }

  /** The open transaction a caller's EntityManager or QueryRunner belongs to, or a clear refusal. */
  private transactionOf(manager: unknown): QueryRunner {
    const m = manager as Partial<QueryRunner> & { queryRunner?: QueryRunner };
    const runner: QueryRunner | undefined =
      typeof m?.startTransaction === 'function' && typeof m.query === 'function'
        ? (m as QueryRunner)
        : m?.queryRunner;
    if (!runner || !runner.isTransactionActive || runner.isReleased) {
      throw new OutboxValidationError(
        'options.manager',
        'is not inside an open transaction, so the event could be committed without your business write. ' +
          'Pass the EntityManager that dataSource.transaction(async (manager) => { ... }) gives its callback, ' +
          'or queryRunner.manager (or the QueryRunner) after await queryRunner.startTransaction(); ' +
          'or omit manager to let the outbox commit the event in its own transaction.',
      );
    }
    const owner =
      (runner as { dataSource?: unknown; connection?: unknown }).dataSource ?? runner.connection;
    if (owner !== this.dataSource) {
      throw new OutboxValidationError(
        'options.manager',
        'belongs to a different DataSource than the outbox store; use a transaction of the DataSource given in store.dataSource',
      );
    }
    return runner;
  }

  /**
   * A plain (non-locking) read decides what exists: a locking read would take gap locks on the id
   * index under MySQL's REPEATABLE READ and make concurrent appenders deadlock each other. A
   * concurrent insert of the same id surfaces as a unique violation, which `append` retries.
   */
  private *appendPlan(batch: AppendableEvent[]): Plan<OutboxEvent[]> {
    const d = this.dialect;
    const { rows: found } =
      yield sql`SELECT ${this.eventColumns('e')}, e.seq FROM ${this.E} e WHERE e.id IN (${list(batch.map((e) => e.id))})`;
    const existing = new Map(found.map((r) => [String(r.event_id).toLowerCase(), this.toEvent(r)]));
    for (const event of batch) {
      const stored = existing.get(event.id.toLowerCase());
      if (stored && !sameEventContent(stored, event)) throw new DuplicateEventError(event.id);
    }
    const fresh = batch.filter((e) => !existing.has(e.id.toLowerCase()));
    const inserted = new Map<string, { seq: number; availableAt: Date }>();
    for (const chunk of chunkBySize(fresh.map(toInsert), d.maxStatementBytes)) {
      for (const [id, row] of yield* d.insertEvents(chunk)) inserted.set(id.toLowerCase(), row);
    }
    const deliveries: SqlText[] = [];
    for (const event of fresh) {
      const row = inserted.get(event.id.toLowerCase())!;
      const handlers =
        event.handlers.length > 0 ? [...new Set(event.handlers)] : [UNEXPANDED_HANDLER];
      for (const handler of handlers) {
        deliveries.push(
          sql`(${randomUUID()}, ${row.seq}, ${event.type}, ${event.key}, ${handler}, 'pending', 0, ${d.time(row.availableAt)}, '[]')`,
        );
      }
    }
    for (let i = 0; i < deliveries.length; i += DELIVERY_ROWS_PER_INSERT) {
      yield sql`INSERT INTO ${this.D} (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors) VALUES ${join(deliveries.slice(i, i + DELIVERY_ROWS_PER_INSERT))}`;
    }
    return batch.map((event) => {
      const stored = existing.get(event.id.toLowerCase());
      if (stored) return stored;
      return {
        id: event.id,
        type: event.type,
        payload: structuredClone(event.payload),
        key: event.key,
        headers: { ...event.headers },
        occurredAt: new Date(event.occurredAt),
        availableAt: inserted.get(event.id.toLowerCase())!.availableAt,
      };
    });
  }

  // ---------------------------------------------------------------- claim

  async claim(request: ClaimRequest): Promise<ClaimedDelivery[]> {
    const names = [...new Set(request.handlers.map((h) => h.name))];
    if (names.length === 0 || request.limit <= 0) return [];
    await this.expand(request);
    const d = this.dialect;
    const token = randomUUID();
    const unexpanded = this.unexpandedBlocker(request);
    const candidates: ClaimCandidates = ({
      limit,
      lock,
      within,
    }) => sql`SELECT c.id FROM ${this.D} c${within ? sql` ${d.byId}` : EMPTY}
WHERE c.handler IN (${list(names)}) AND c.status IN ('pending', 'leased')${within ? sql` AND c.id IN (${list(within)})` : EMPTY}
  AND ((c.status = 'pending' AND c.available_at <= ${d.now}) OR (c.status = 'leased' AND c.lease_until <= ${d.now}))
  AND (c.event_key IS NULL OR (NOT EXISTS (
    SELECT 1 FROM ${this.D} p
    WHERE p.handler = c.handler AND p.event_key = c.event_key AND p.status IN ('pending', 'leased') AND p.event_seq < c.event_seq)${unexpanded}))
ORDER BY c.event_seq
LIMIT ${raw(String(Math.floor(limit)))} ${lock ? d.skipLocked : EMPTY}`;
    const columns = sql`d.id, d.handler, d.attempts, d.lease_owner, d.lease_token, ${d.timeOut(raw('d.lease_until'))} AS lease_until, d.event_seq, ${this.eventColumns('e')}`;
    const rows = await d.run(
      () =>
        d.claim(
          {
            handlers: names,
            limit: request.limit,
            leaseMs: request.leaseMs,
            owner: request.workerId,
            token,
          },
          candidates,
          columns,
        ),
      d.claimRunOptions,
    );
    return rows
      .sort(
        (a, b) =>
          Number(a.event_seq) - Number(b.event_seq) ||
          String(a.handler).localeCompare(String(b.handler)),
      )
      .map((r) => ({
        id: String(r.id),
        handler: String(r.handler),
        attempt: Number(r.attempts),
        event: this.toEvent(r),
        lease: {
          deliveryId: String(r.id),
          owner: String(r.lease_owner),
          token: String(r.lease_token),
          leaseUntil: d.readTime(r.lease_until),
        },
      }));
  }

  /**
   * Per-key order across expansion (SPEC §2.6): an earlier event of the key that is still an
   * unexpanded delivery of a type the handler subscribes to will become one of the handler's
   * deliveries, so it blocks the later ones just as that delivery would. This covers placeholders
   * this claim did not get to expand (a backlog beyond EXPAND_BATCH, or not due yet) and those
   * another worker is expanding right now: its row is locked (SKIP LOCKED skipped it) but, until
   * that transaction commits, the committed placeholder is still what this statement reads, and
   * afterwards the expanded copies are. Served by the (handler, event_key, event_seq) index.
   */
  private unexpandedBlocker(request: ClaimRequest): SqlText {
    const typesOf = new Map<string, Set<string>>();
    for (const h of request.handlers) {
      const types = typesOf.get(h.name) ?? new Set<string>();
      for (const type of h.types) types.add(type);
      typesOf.set(h.name, types);
    }
    // Handlers with the same types share one condition (usually: one per type).
    const byTypes = new Map<string, { handlers: string[]; types: string[] }>();
    for (const [handler, types] of typesOf) {
      if (types.size === 0) continue;
      const sorted = [...types].sort();
      const k = JSON.stringify(sorted);
      const group = byTypes.get(k) ?? { handlers: [], types: sorted };
      group.handlers.push(handler);
      byTypes.set(k, group);
    }
    if (byTypes.size === 0) return EMPTY;
    const which = join(
      [...byTypes.values()].map(
        (g) => sql`(c.handler IN (${list(g.handlers)}) AND u.event_type IN (${list(g.types)}))`,
      ),
      ' OR ',
    );
    return sql` AND NOT EXISTS (
    SELECT 1 FROM ${this.D} u
    WHERE u.handler = ${UNEXPANDED_HANDLER} AND u.event_key = c.event_key AND u.status IN ('pending', 'leased') AND u.event_seq < c.event_seq AND (${which}))`;
  }

  /**
   * Turns due unexpanded deliveries of types this worker handles into one delivery per handler,
   * oldest first, keeping the event's position so per-key order holds across the expansion.
   * Placeholders not due yet stay as they are until they are (they still hold their key, see
   * `unexpandedBlocker`), so a backlog of scheduled events never delays the due ones.
   */
  private async expand(request: ClaimRequest): Promise<void> {
    const byType = new Map<string, string[]>();
    for (const h of request.handlers) {
      for (const type of h.types)
        byType.set(type, [...new Set([...(byType.get(type) ?? []), h.name])]);
    }
    if (byType.size === 0) return;
    const select = (lock: SqlText) =>
      sql`SELECT id, event_type FROM ${this.D} WHERE handler = ${UNEXPANDED_HANDLER} AND status = 'pending' AND available_at <= ${this.dialect.now} AND event_type IN (${list([...byType.keys()])}) ORDER BY event_seq LIMIT ${raw(String(EXPAND_BATCH))} ${lock}`;
    // Cheap unlocked probe first, so the common case costs one statement and no transaction, and
    // after an empty probe none at all for a while (an app-clock throttle, not a due time).
    if (Date.now() < this.expandQuietUntil) return;
    const probe = await this.one(select(EMPTY));
    if (probe.rows.length === 0) {
      this.expandQuietUntil = Date.now() + EXPAND_PROBE_QUIET_MS;
      return;
    }
    const d = this.dialect;
    const D = this.D;
    await d.run(
      function* (): Plan<void> {
        const { rows } = yield select(d.skipLocked);
        if (rows.length === 0) return;
        const copies: SqlText[] = [];
        for (const row of rows) {
          for (const handler of byType.get(String(row.event_type)) ?? []) {
            copies.push(
              sql`SELECT ${d.uuid(randomUUID())}, event_seq, event_type, event_key, ${handler}, status, attempts, available_at, errors FROM ${D} WHERE id = ${row.id}`,
            );
          }
        }
        yield sql`INSERT INTO ${D} (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors) ${join(copies, ' UNION ALL ')}`;
        yield sql`DELETE FROM ${D} WHERE id IN (${list(rows.map((r) => r.id))})`;
      },
      { transaction: true, deadlockRetries: 3 },
    );
  }

  // ---------------------------------------------------------------- lease operations

  private fenced(lease: Lease): SqlText {
    return sql`id = ${lease.deliveryId} AND status = 'leased' AND lease_owner = ${lease.owner} AND lease_token = ${lease.token} AND lease_until > ${this.dialect.now}`;
  }

  private async settle(lease: Lease, set: SqlText): Promise<void> {
    if (!isUuid(lease.deliveryId)) throw new LeaseLostError(lease.deliveryId, lease.owner);
    const { affected } = await this.one(
      sql`UPDATE ${this.D} ${this.dialect.byId} SET ${set}, lease_owner = NULL, lease_token = NULL, lease_until = NULL WHERE ${this.fenced(lease)}`,
    );
    if (affected === 0) throw new LeaseLostError(lease.deliveryId, lease.owner);
  }

  async renew(lease: Lease, leaseMs: number): Promise<Lease> {
    if (!isUuid(lease.deliveryId)) throw new LeaseLostError(lease.deliveryId, lease.owner);
    const d = this.dialect;
    const update = sql`UPDATE ${this.D} ${d.byId} SET lease_until = ${d.plusMs(d.now, leaseMs)} WHERE ${this.fenced(lease)}`;
    const until = d.timeOut(raw('lease_until'));
    const check = sql`SELECT ${until} AS lease_until FROM ${this.D} ${d.byId} WHERE id = ${lease.deliveryId} AND status = 'leased' AND lease_owner = ${lease.owner} AND lease_token = ${lease.token}`;
    const rows = await d.run(function* (): Plan<Row[]> {
      if (d.updateReturning) return (yield sql`${update} RETURNING ${until} AS lease_until`).rows;
      if ((yield update).affected === 0) return [];
      return (yield check).rows;
    });
    if (rows.length === 0) throw new LeaseLostError(lease.deliveryId, lease.owner);
    return { ...lease, leaseUntil: d.readTime(rows[0].lease_until) };
  }

  ack(lease: Lease): Promise<void> {
    return this.settle(lease, ACKED(this.dialect));
  }

  /**
   * `ack` for many leases in one round trip (one commit): the same fenced UPDATE as `ack`, over a
   * chunk of leases at a time, and only the rows whose lease still matches and is live change.
   * PostgreSQL and SQLite learn which through `RETURNING`; MySQL/MariaDB has none, so it locks
   * the owned-and-live rows first (`SELECT … FOR UPDATE`, by primary key) and updates exactly
   * those: nobody can claim a locked row, so its lease is still ours when the UPDATE runs.
   */
  async ackMany(leases: Lease[]): Promise<string[]> {
    // A lease that is not a UUID cannot own a row (and PostgreSQL would reject it as a uuid).
    const valid = leases.filter((l) => isUuid(l.deliveryId));
    if (valid.length === 0) return [];
    // Primary-key order: concurrent batches lock rows in one order.
    valid.sort((a, b) => (a.deliveryId < b.deliveryId ? -1 : a.deliveryId > b.deliveryId ? 1 : 0));
    const chunks: Lease[][] = [];
    for (let i = 0; i < valid.length; i += ACK_MANY_CHUNK)
      chunks.push(valid.slice(i, i + ACK_MANY_CHUNK));
    const d = this.dialect;
    const { D } = this;
    const set = sql`${ACKED(d)}, lease_owner = NULL, lease_token = NULL, lease_until = NULL`;
    const rows = await d.run(
      function* (): Plan<Row[]> {
        const acked: Row[] = [];
        for (const chunk of chunks) {
          const ids = list([...new Set(chunk.map((l) => l.deliveryId))]);
          const owned = join(
            chunk.map(
              (l) =>
                sql`(id = ${l.deliveryId} AND lease_owner = ${l.owner} AND lease_token = ${l.token})`,
            ),
            ' OR ',
          );
          const where = sql`id IN (${ids}) AND status = 'leased' AND lease_until > ${d.now} AND (${owned})`;
          if (d.updateReturning) {
            acked.push(
              ...(yield sql`UPDATE ${D} ${d.byId} SET ${set} WHERE ${where} RETURNING id`).rows,
            );
            continue;
          }
          const { rows: live } = yield sql`SELECT id FROM ${D} ${d.byId} WHERE ${where} FOR UPDATE`;
          if (live.length === 0) continue;
          yield sql`UPDATE ${D} ${d.byId} SET ${set} WHERE id IN (${list(live.map((r) => r.id))})`;
          acked.push(...live);
        }
        return acked;
      },
      d.updateReturning && chunks.length === 1
        ? {}
        : // READ COMMITTED: the locking read takes no gap locks for ids that are gone.
          { transaction: true, isolation: 'READ COMMITTED', deadlockRetries: 3 },
    );
    // Report each acknowledged delivery under the id its caller gave.
    const given = new Map(valid.map((l) => [l.deliveryId.toLowerCase(), l.deliveryId]));
    const out = new Set<string>();
    for (const r of rows) {
      const id = String(r.id).toLowerCase();
      out.add(given.get(id) ?? id);
    }
    return [...out];
  }

  retry(lease: Lease, delayMs: number, error: DeliveryErrorInput): Promise<void> {
    const d = this.dialect;
    return this.settle(
      lease,
      sql`status = 'pending', available_at = ${d.plusMs(d.now, retryDelay(delayMs))}, errors = ${this.errorEntry(error)}`,
    );
  }

  deadLetter(lease: Lease, reason: DeadLetterReason, error: DeliveryErrorInput): Promise<void> {
    return this.settle(
      lease,
      sql`status = 'dead', reason = ${reason}, done_at = ${this.dialect.now}, errors = ${this.errorEntry(error)}`,
    );
  }

  release(lease: Lease): Promise<void> {
    return this.settle(
      lease,
      sql`status = 'pending', attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, available_at = ${this.dialect.now}`,
    );
  }

  private errorEntry(error: DeliveryErrorInput): SqlText {
    return this.dialect.appendError(
      raw('errors'),
      {
        name: withoutNul(error.name ?? 'Error').slice(0, 255),
        message: withoutNul(error.message ?? '').slice(0, this.errorMaxLength),
        attempt: Math.floor(Number(error.attempt) || 0),
        workerId: withoutNul(error.workerId ?? '').slice(0, 255),
      },
      OUTBOX_ERROR_HISTORY,
    );
  }

  // ---------------------------------------------------------------- dead letters

  /** Conditions selecting dead letters; `a` is the column prefix ('' or 'd.'). */
  private deadWhere(filter: DeadLetterFilter, a = ''): SqlText {
    const d = this.dialect;
    const col = (c: string) => raw(`${a}${c}`);
    const conds = [sql`${col('status')} = 'dead'`];
    if (filter.type !== undefined) conds.push(sql`${col('event_type')} = ${filter.type}`);
    if (filter.handler !== undefined) conds.push(sql`${col('handler')} = ${filter.handler}`);
    if (filter.key !== undefined) conds.push(sql`${col('event_key')} = ${filter.key}`);
    if (filter.failedBefore !== undefined)
      conds.push(sql`${col('done_at')} < ${d.time(filter.failedBefore)}`);
    if (filter.failedAfter !== undefined)
      conds.push(sql`${col('done_at')} >= ${d.time(filter.failedAfter)}`);
    return join(conds, ' AND ');
  }

  private selectorWhere(selector: DeadLetterSelector, a = ''): SqlText | null {
    if ('ids' in selector) {
      const ids = selector.ids.filter(isUuid);
      if (ids.length === 0) return null;
      return sql`${raw(`${a}status`)} = 'dead' AND ${raw(`${a}id`)} IN (${list(ids)})`;
    }
    return this.deadWhere(selector.filter ?? {}, a);
  }

  private deadColumns(): SqlText {
    const d = this.dialect;
    return sql`d.id, d.handler, d.attempts, d.reason, ${d.jsonOut(raw('d.errors'))} AS errors, ${d.timeOut(raw('d.done_at'))} AS done_at, ${this.eventColumns('e')}`;
  }

  private toDeadLetter(r: Row): DeadLetter {
    const event = this.toEvent(r);
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
      deadAt: this.dialect.readTime(r.done_at),
    };
  }

  async listDeadLetters(query: DeadLetterPageQuery): Promise<DeadLetterPage> {
    const d = this.dialect;
    const limit = Math.max(1, Math.floor(query.limit));
    const after = query.cursor ? decodeCursor(query.cursor) : null;
    if (after && !isUuid(after.id))
      throw new OutboxValidationError('cursor', 'is not a cursor returned by a previous page');
    const keyset = after
      ? sql` AND (d.done_at > ${d.time(after.deadAt)} OR (d.done_at = ${d.time(after.deadAt)} AND d.id > ${after.id}))`
      : EMPTY;
    const { rows } = await this.one(
      sql`SELECT ${this.deadColumns()} FROM ${this.D} d JOIN ${this.E} e ON e.seq = d.event_seq WHERE ${this.deadWhere(query, 'd.')}${keyset} ORDER BY d.done_at, d.id LIMIT ${raw(String(limit + 1))}`,
    );
    const items = rows.slice(0, limit).map((r) => this.toDeadLetter(r));
    const last = items[items.length - 1];
    return {
      items,
      nextCursor:
        rows.length > limit && last ? encodeCursor({ deadAt: last.deadAt, id: last.id }) : null,
    };
  }

  async getDeadLetter(id: string): Promise<DeadLetter | null> {
    if (!isUuid(id)) return null;
    const { rows } = await this.one(
      sql`SELECT ${this.deadColumns()} FROM ${this.D} d JOIN ${this.E} e ON e.seq = d.event_seq WHERE d.id = ${id} AND d.status = 'dead'`,
    );
    return rows[0] ? this.toDeadLetter(rows[0]) : null;
  }

  async summarizeDeadLetters(filter: DeadLetterFilter): Promise<DeadLetterSummaryRow[]> {
    const { rows } = await this.one(
      sql`SELECT d.event_type, d.handler, ${this.dialect.jsonOut(raw('d.errors'))} AS errors FROM ${this.D} d WHERE ${this.deadWhere(filter, 'd.')}`,
    );
    const groups = new Map<string, DeadLetterSummaryRow>();
    for (const r of rows) {
      const errors = parseErrors(r.errors);
      const last = errors[errors.length - 1];
      const row = {
        type: String(r.event_type),
        handler: String(r.handler),
        errorName: last?.name ?? 'Error',
        fingerprint: errorFingerprint(last?.message ?? ''),
        count: 0,
      };
      const k = JSON.stringify([row.type, row.handler, row.errorName, row.fingerprint]);
      const group = groups.get(k) ?? row;
      group.count += 1;
      groups.set(k, group);
    }
    return [...groups.values()].sort((a, b) => b.count - a.count);
  }

  async replay(selector: DeadLetterSelector, availableAt?: Date): Promise<number> {
    const where = this.selectorWhere(selector);
    if (!where) return 0;
    const d = this.dialect;
    const at = availableAt ? d.time(availableAt) : d.now;
    const { affected } = await this.one(
      sql`UPDATE ${this.D} SET status = 'pending', attempts = 0, reason = NULL, done_at = NULL, available_at = ${at} WHERE ${where}`,
    );
    return affected;
  }

  async purge(selector: DeadLetterSelector): Promise<number> {
    const where = this.selectorWhere(selector);
    if (!where) return 0;
    const { D, E } = this;
    return this.dialect.run(
      function* (): Plan<number> {
        const { rows } = yield sql`SELECT DISTINCT event_seq FROM ${D} WHERE ${where}`;
        if (rows.length === 0) return 0;
        const { affected } = yield sql`DELETE FROM ${D} WHERE ${where}`;
        yield* deleteOrphans(
          E,
          D,
          rows.map((r) => Number(r.event_seq)),
        );
        return affected;
      },
      { transaction: true, deadlockRetries: 3 },
    );
  }

  // ---------------------------------------------------------------- stats and cleanup

  async stats(): Promise<OutboxStoreStats> {
    const d = this.dialect;
    const due = sql`d.status = 'pending' AND d.available_at <= ${d.now}`;
    const { D } = this;
    const [nowRows, rows] = await d.run(function* (): Plan<[Row[], Row[]]> {
      const now = yield sql`SELECT ${d.timeOut(d.now)} AS now`;
      const groups =
        yield sql`SELECT d.event_type, d.status, COUNT(*) AS n, SUM(CASE WHEN ${due} THEN 1 ELSE 0 END) AS due, ${d.timeOut(sql`MIN(CASE WHEN ${due} THEN d.available_at END)`)} AS oldest FROM ${D} d WHERE d.status IN ('pending', 'leased', 'dead') GROUP BY d.event_type, d.status`;
      return [now.rows, groups.rows];
    });
    const now = d.readTime(nowRows[0]?.now).getTime();
    const stats: OutboxStoreStats = {
      pending: 0,
      due: 0,
      leased: 0,
      dead: 0,
      oldestPendingAgeMs: 0,
      byType: {},
    };
    for (const r of rows) {
      const n = Number(r.n);
      const status = String(r.status) as 'pending' | 'leased' | 'dead';
      const t = (stats.byType[String(r.event_type)] ??= { pending: 0, leased: 0, dead: 0 });
      t[status] += n;
      stats[status] += n;
      if (status === 'pending') {
        stats.due += Number(r.due ?? 0);
        if (r.oldest !== null && r.oldest !== undefined) {
          stats.oldestPendingAgeMs = Math.max(
            stats.oldestPendingAgeMs,
            now - d.readTime(r.oldest).getTime(),
          );
        }
      }
    }
    return stats;
  }

  async cleanup(options: CleanupOptions): Promise<CleanupResult> {
    const d = this.dialect;
    const { D, E } = this;
    const lockName = `${d.tables.lockName}:cleanup`;
    const batch = raw(String(Math.max(1, Math.floor(options.batchSize))));
    return d.run(
      function* (): Plan<CleanupResult> {
        const result: CleanupResult = { events: 0, deadLetters: 0 };
        // One runner at a time: others skip this round instead of queueing on the same rows.
        const { rows: locked } = yield d.tryLock(lockName);
        if (!isTruthy(locked[0]?.ok)) return result;
        const unlock = d.unlock(lockName);
        try {
          if (options.deadLetterRetentionMs !== null) {
            const cutoff = d.plusMs(d.now, -options.deadLetterRetentionMs);
            const { rows } =
              yield sql`SELECT id, event_seq FROM ${D} WHERE status = 'dead' AND done_at < ${cutoff} ORDER BY done_at LIMIT ${batch}`;
            if (rows.length > 0) {
              yield sql`DELETE FROM ${D} WHERE id IN (${list(rows.map((r) => r.id))})`;
              yield* deleteOrphans(
                E,
                D,
                rows.map((r) => Number(r.event_seq)),
              );
              result.deadLetters = rows.length;
            }
          }
          const cutoff = d.plusMs(d.now, -options.deliveredRetentionMs);
          const { rows } =
            yield sql`SELECT e.seq FROM ${E} e WHERE NOT EXISTS (SELECT 1 FROM ${D} x WHERE x.event_seq = e.seq AND (x.status <> 'delivered' OR x.done_at >= ${cutoff})) ORDER BY e.seq LIMIT ${batch}`;
          if (rows.length > 0) {
            const seqs = list(rows.map((r) => Number(r.seq)));
            yield sql`DELETE FROM ${D} WHERE event_seq IN (${seqs})`;
            yield sql`DELETE FROM ${E} WHERE seq IN (${seqs})`;
            result.events = rows.length;
          }
          return result;
        } finally {
          if (unlock) yield unlock;
        }
      },
      { transaction: true, deadlockRetries: 3 },
    );
  }

  // ---------------------------------------------------------------- rows

  private eventColumns(e: string): SqlText {
    const d = this.dialect;
    const c = (name: string) => raw(`${e}.${name}`);
    return sql`${c('id')} AS event_id, ${c('type')} AS type, ${c('event_key')} AS event_key, ${d.jsonOut(c('payload'))} AS payload, ${d.jsonOut(c('headers'))} AS headers, ${d.timeOut(c('occurred_at'))} AS occurred_at, ${d.timeOut(c('available_at'))} AS available_at`;
  }

  private toEvent(r: Row): OutboxEvent {
    return {
      id: String(r.event_id),
      type: String(r.type),
      payload: JSON.parse(String(r.payload)),
      key: r.event_key === null || r.event_key === undefined ? null : String(r.event_key),
      headers: JSON.parse(String(r.headers)) as Record<string, string>,
      occurredAt: this.dialect.readTime(r.occurred_at),
      availableAt: this.dialect.readTime(r.available_at),
    };
  }
}

function* deleteOrphans(E: SqlText, D: SqlText, seqs: number[]): Plan<void> {
  const unique = [...new Set(seqs)];
  if (unique.length === 0) return;
  yield sql`DELETE FROM ${E} WHERE seq IN (${list(unique)}) AND seq NOT IN (SELECT event_seq FROM ${D} WHERE event_seq IN (${list(unique)}))`;
}

/**
 * Error text without NUL characters: PostgreSQL text and jsonb cannot hold U+0000 (the whole
 * statement would fail and the outcome would be lost); stripped on every dialect alike.
 */
function withoutNul(value: unknown): string {
  return String(value).replaceAll('\u0000', '');
}

/** Longest retry delay written (100 years); beyond it the databases' date arithmetic overflows. */
const MAX_RETRY_DELAY_MS = 100 * 365 * 86_400_000;

/** A retry delay the database accepts: NaN, infinite or negative delays mean "now". */
function retryDelay(delayMs: number): number {
  const ms = Number(delayMs);
  return Number.isFinite(ms) && ms > 0 ? Math.min(ms, MAX_RETRY_DELAY_MS) : 0;
}

function isTruthy(value: unknown): boolean {
  return value === true || value === 1 || value === '1' || value === 't' || value === 1n;
}

function parseErrors(value: unknown): DeliveryError[] {
  const list = (typeof value === 'string' ? JSON.parse(value) : (value ?? [])) as Array<
    Record<string, unknown>
  >;
  return list.map((e) => ({
    name: String(e.name),
    message: String(e.message),
    attempt: Number(e.attempt),
    workerId: String(e.workerId),
    at: new Date(Number(e.at)),
  }));
}

/** One event per id; the same id twice in a batch must carry the same content. */
function dedupeBatch(events: AppendableEvent[]): AppendableEvent[] {
  const byId = new Map<string, AppendableEvent>();
  for (const event of events) {
    const seen = byId.get(event.id.toLowerCase());
    if (seen && !sameEventContent(seen, event)) throw new DuplicateEventError(event.id);
    if (!seen) byId.set(event.id.toLowerCase(), event);
  }
  return [...byId.values()];
}

function orderLike(input: AppendableEvent[], stored: OutboxEvent[]): OutboxEvent[] {
  const byId = new Map(stored.map((e) => [e.id.toLowerCase(), e]));
  return input.map((e) => byId.get(e.id.toLowerCase())!);
}

function toInsert(e: AppendableEvent): EventInsert {
  return {
    id: e.id,
    type: e.type,
    key: e.key,
    payload: JSON.stringify(e.payload),
    headers: JSON.stringify(e.headers ?? {}),
    occurredAt: e.occurredAt,
    availableAt: e.availableAt,
  };
}

/** Splits rows so one INSERT stays under the dialect's statement size (MySQL packets). */
function chunkBySize(rows: EventInsert[], maxBytes: number): EventInsert[][] {
  const chunks: EventInsert[][] = [];
  let current: EventInsert[] = [];
  let size = 0;
  for (const row of rows) {
    const bytes =
      Buffer.byteLength(row.payload, 'utf8') + Buffer.byteLength(row.headers, 'utf8') + 512;
    if (current.length > 0 && (size + bytes > maxBytes || current.length >= EVENTS_PER_INSERT)) {
      chunks.push(current);
      current = [];
      size = 0;
    }
    current.push(row);
    size += bytes;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}

/** Fails early, with the fix, when options cannot work. */
export function asTypeOrmDataSource(dataSource: unknown): DataSource {
  const ds = dataSource as Partial<DataSource> | undefined;
  if (!ds || typeof ds !== 'object' || !ds.options || typeof ds.createQueryRunner !== 'function') {
    throw new OutboxOptionsError(
      'store.dataSource',
      'expected a TypeORM DataSource (or set store.dataSourceToken)',
    );
  }
  return ds as DataSource;
}
