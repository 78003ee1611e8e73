import { newId } from '../../../ids';
import { DuplicateEventError } from '../../../errors/duplicate-event.error';
import { OutboxEvent } from '../../../interfaces/outbox-event.interface';
import { AppendableEvent, StoreAppendOptions } from '../../../interfaces/outbox-store.interface';
import { UNEXPANDED_HANDLER } from '../../../outbox.constants';
import { payloadTextOf } from '../../payload-text';
import { sameEventContent } from '../../store-helpers';
import { AppendRow, InsertedEvent, Plan } from '../dialects/sql-dialect';
import { EMPTY, raw, sql } from '../sql';
import { OutboxValidationError } from '../../../errors/outbox-validation.error';
import type { CallerTransaction } from '../../../executors/sql-executor';
import { CommitWatch } from './commit-watch';
import { ID_BATCH, StoreContext } from './context';

const EVENTS_PER_INSERT = 1000;

/**
 * Appends events with their first deliveries, in the caller's transaction or the store's own.
 * The common case is the dialect's insert alone (one statement on PostgreSQL, two elsewhere).
 */
export class AppendOp {
  constructor(
    private readonly ctx: StoreContext,
    private readonly commits: CommitWatch,
  ) {}

  async append(
    events: AppendableEvent[],
    options: StoreAppendOptions = {},
  ): Promise<OutboxEvent[]> {
    // This process wrote a placeholder: the next claim must look for it at once.
    const placeholders = events.some((e) => e.handlers.length === 0);
    if (placeholders) this.ctx.expandQuietUntil = 0;
    const caller = await this.callerOf(options);
    if (events.length === 0) return [];
    const d = this.ctx.dialect;
    const batch = events.length === 1 ? events : dedupeBatch(events);
    const plan = () => this.appendPlan(batch);
    const attempt = () =>
      caller ? d.runOn(caller.connection, plan) : d.run(plan, { transaction: true });
    let stored: OutboxEvent[] | null = null;
    let retried = false;
    if (caller && batch.length === 1 && d.appendOneOn) {
      // The usual append, one event in the caller's transaction: its one statement sent straight
      // to the connection (run 28, bench/RESULTS.md). An id that exists already inserts nothing
      // and takes the plan below, which reads the stored event and compares contents.
      const row = toAppendRow(batch[0]);
      try {
        const inserted = await d.appendOneOn(caller.connection, row);
        if (inserted) stored = [storedEvent(batch[0], row, inserted.availableAt)];
      } catch (error) {
        // Counts as the plan's first pass ending in a unique violation: the plan below is the
        // second and last (as with the retry inside it).
        if (!d.isUniqueViolation(error)) throw error;
        retried = true;
      }
    }
    if (stored === null) {
      try {
        stored = orderLike(events, await attempt());
      } catch (error) {
        // Another transaction inserted one of these ids between our check and our insert; the
        // second pass sees it and compares contents (see Guarantees: idempotent append).
        if (retried || !d.isUniqueViolation(error)) throw error;
        stored = orderLike(events, await attempt());
      }
    }
    if (caller) await this.commits.inTransaction(caller.connection);
    this.commits.appendedBy(caller, placeholders);
    return stored;
  }

  /**
   * The caller's transaction, given in the option of the store's client (`manager` for TypeORM,
   * `tx` for the others), or null. The other option is refused: it names another client's
   * transaction, which this store cannot write in.
   */
  private callerOf(options: StoreAppendOptions): Promise<CallerTransaction | null> {
    const { executor } = this.ctx;
    const other = executor.txOption === 'manager' ? 'tx' : 'manager';
    if (options[other] !== undefined && options[other] !== null) {
      throw new OutboxValidationError(
        `options.${other}`,
        `this outbox store writes through ${executor.client}, which takes your transaction as ` +
          `options.${executor.txOption} (${executor.txOption === 'manager' ? "TypeORM's EntityManager or QueryRunner" : `${executor.client}'s own transaction object`}); ` +
          `options.${other} is for ${other === 'manager' ? "the 'typeorm' store" : "the 'sql' store"}.`,
      );
    }
    const tx = options[executor.txOption];
    return tx === undefined || tx === null ? Promise.resolve(null) : this.commits.transactionOf(tx);
  }

  /**
   * No read before the write and no savepoint. Only when an id exists already does it read the
   * stored events to compare contents; a different content undoes what this call inserted and
   * fails, so the caller's transaction holds nothing of the batch. The read is a plain one: a
   * locking read would take gap locks on MySQL's REPEATABLE READ and make appenders deadlock.
   * Only ids that exist but that read could not see (committed after the caller's snapshot) are
   * read again with `latestRead`, a locking read of existing rows there.
   */
  private *appendPlan(batch: AppendableEvent[]): Plan<OutboxEvent[]> {
    const { ctx } = this;
    const d = ctx.dialect;
    const rows = batch.map(toAppendRow);
    const inserted = new Map<string, InsertedEvent>();
    const insert = function* (todo: AppendRow[]): Plan<void> {
      const chunks = todo.length === 1 ? [todo] : chunkBySize(todo, d.maxStatementBytes);
      for (const chunk of chunks) {
        for (const [id, row] of yield* d.appendEvents(chunk)) inserted.set(id, row);
      }
    };
    try {
      yield* insert(rows);
    } catch (error) {
      // MySQL and SQLite refuse the whole statement on a duplicate id and write none of it.
      if (!d.isUniqueViolation(error)) throw error;
    }
    const rest = rows.filter((r) => !inserted.has(r.id.toLowerCase()));
    const existing = new Map<string, OutboxEvent>();
    const compare = (ids: string[], latest: boolean) =>
      this.compareStored(batch, ids, latest, existing, inserted);
    if (rest.length > 0) {
      yield* compare(
        rest.map((r) => r.id),
        false,
      );
      const todo = rest.filter((r) => !existing.has(r.id.toLowerCase()));
      try {
        yield* insert(todo);
      } catch (error) {
        // An id another transaction committed after this one's snapshot was taken (MySQL's
        // REPEATABLE READ, the default): the plain read above does not see it. Row by row tells
        // which ids exist; the others are written.
        if (!d.isUniqueViolation(error)) throw error;
        for (const row of todo) {
          if (inserted.has(row.id.toLowerCase())) continue;
          try {
            yield* insert([row]);
          } catch (rowError) {
            if (!d.isUniqueViolation(rowError)) throw rowError;
          }
        }
      }
      // Ids neither written nor read: committed elsewhere since the read (PostgreSQL's
      // `ON CONFLICT` skipped them) or outside this transaction's snapshot. Their latest committed
      // rows are compared (on MySQL a shared locking read, of rows that exist: no gap locks).
      const unseen = todo.filter((r) => !inserted.has(r.id.toLowerCase()));
      if (unseen.length > 0) {
        yield* compare(
          unseen.map((r) => r.id),
          true,
        );
        const gone = unseen.find((r) => !existing.has(r.id.toLowerCase()));
        if (gone) {
          yield* this.undoAppend([...inserted.values()].map((r) => r.seq));
          throw new Error(
            `Event ${gone.id} was being written by another transaction while this append ran and could not be read back; nothing of this append was written: try again.`,
          );
        }
      }
    }
    return batch.map((event, i) => {
      const stored = existing.get(event.id.toLowerCase());
      if (stored) return stored;
      return storedEvent(event, rows[i], inserted.get(event.id.toLowerCase())!.availableAt);
    });
  }

  /**
   * Reads the stored events of `ids` into `existing` (`latest`: past the transaction's snapshot);
   * one whose content differs from the batch's undoes what this append inserted and fails.
   */
  private *compareStored(
    batch: AppendableEvent[],
    ids: string[],
    latest: boolean,
    existing: Map<string, OutboxEvent>,
    inserted: Map<string, InsertedEvent>,
  ): Plan<void> {
    const { ctx } = this;
    const d = ctx.dialect;
    const { rows: found } =
      yield sql`SELECT ${ctx.eventColumns('e')} FROM ${ctx.E} e WHERE ${d.anyOf(raw('e.id'), ids, 'uuid')}${latest ? sql` ${d.latestRead}` : EMPTY}`;
    for (const r of found) existing.set(String(r.event_id).toLowerCase(), ctx.toEvent(r));
    const conflict = batch.find((e) => {
      const stored = existing.get(e.id.toLowerCase());
      return stored !== undefined && !sameEventContent(stored, e);
    });
    if (conflict) {
      yield* this.undoAppend([...inserted.values()].map((r) => r.seq));
      throw new DuplicateEventError(conflict.id);
    }
  }

  /** Removes events (and their deliveries) this append wrote before it found a conflict. */
  private *undoAppend(seqs: number[]): Plan<void> {
    const { D, E, dialect: d } = this.ctx;
    for (let i = 0; i < seqs.length; i += ID_BATCH) {
      const some = seqs.slice(i, i + ID_BATCH);
      yield sql`DELETE FROM ${D} WHERE ${d.anyOf(raw('event_seq'), some, 'bigint')}`;
      yield sql`DELETE FROM ${E} WHERE ${d.anyOf(raw('seq'), some, 'bigint')}`;
    }
  }
}

/** What `append` returns for an event it inserted as `row`. */
function storedEvent(event: AppendableEvent, row: AppendRow, availableAt: Date): OutboxEvent {
  return {
    id: event.id,
    type: event.type,
    // What was stored: the service's validated payload is a parse of the text written, owned
    // by no one else; otherwise read back from the JSON (a quarter of structuredClone's cost).
    payload: payloadTextOf(event) === undefined ? JSON.parse(row.payload) : event.payload,
    key: event.key,
    headers: { ...event.headers },
    occurredAt: new Date(event.occurredAt),
    availableAt,
  };
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
  if (input.length === 1 && stored.length === 1) return stored;
  const byId = new Map(stored.map((e) => [e.id.toLowerCase(), e]));
  return input.map((e) => byId.get(e.id.toLowerCase())!);
}

function toAppendRow(e: AppendableEvent): AppendRow {
  const handlers =
    e.handlers.length === 0
      ? [UNEXPANDED_HANDLER]
      : e.handlers.length === 1
        ? e.handlers
        : [...new Set(e.handlers)];
  return {
    id: e.id,
    type: e.type,
    key: e.key,
    payload: payloadTextOf(e) ?? JSON.stringify(e.payload),
    headers: JSON.stringify(e.headers ?? {}),
    occurredAt: e.occurredAt,
    availableAt: e.availableAt,
    deliveries: handlers.map((handler) => ({ id: newId(), handler })),
  };
}

/** Splits rows so one INSERT stays under the dialect's statement size (MySQL packets). */
function chunkBySize(rows: AppendRow[], maxBytes: number): AppendRow[][] {
  const chunks: AppendRow[][] = [];
  let current: AppendRow[] = [];
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
