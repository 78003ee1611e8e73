import { randomUUID } from 'node:crypto';
import { ClaimedDelivery, ClaimRequest } from '../../../interfaces/outbox-store.interface';
import { UNEXPANDED_HANDLER } from '../../../outbox.constants';
import { ClaimCandidates, Plan, Row } from '../dialects/sql-dialect';
import { EMPTY, join, list, raw, sql, SqlText } from '../sql';
import { StoreContext } from './context';
import { newId } from '../../../ids';

interface ClaimShape {
  names: string[];
  candidates: ClaimCandidates;
  /**
   * A per-handler claim with several handlers: per handler, the candidates the last claim checked
   * first and the rows it got (see `firstLimits`).
   */
  last?: { limits: number[]; got: number[] };
}

/**
 * The candidate query's WHERE clause for a handler condition (one name, or the list). With
 * `heads` (one handler's name as a value, and how many of its open deliveries the claim may probe
 * one by one), a long keyed backlog reads its keys' heads from the key index instead (see
 * `keyHead`).
 */
type CandidateWhere = (
  handler: SqlText,
  within: unknown[] | undefined,
  lock: boolean,
  heads?: KeyHeads,
) => SqlText;

interface KeyHeads {
  /** The handler's name as one value (a parameter, or the LATERAL's `h.name`). */
  name: SqlText;
  /** Open deliveries of the handler, oldest first, whose key is probed one by one. */
  probes: number;
}

/** The placeholder handler as SQL text (a constant of the library, no parameter; see `unexpandedBlocker`). */
const UNEXPANDED_LITERAL = raw(`'${UNEXPANDED_HANDLER.replace(/'/g, "''")}'`);

/** Unexpanded deliveries turned into per-handler ones per claim, at most. */
const EXPAND_BATCH = 500;
/**
 * After a probe finds no unexpanded delivery, claims skip the probe this long (a round trip
 * saved per claim). Order stays safe meanwhile: placeholders still hold their keys in the claim
 * itself; only the first delivery of a type this process cannot name waits up to this long.
 */
const EXPAND_PROBE_QUIET_MS = 1_000;
/**
 * PostgreSQL: a claim probes the key of at most this many times its limit (and at least
 * `KEY_PROBES_MIN`) of the handler's oldest due deliveries one by one; past them, it takes its
 * keys' heads from the key index (see `keyHead`).
 */
const KEY_PROBES_PER_LIMIT = 5;
const KEY_PROBES_MIN = 500;
/**
 * Past the bound, the keys' heads are read only for a handler with at most this many keys open
 * (one descent each); with more, the claim counts this many and probes on (see `keyHead`).
 */
const KEY_HEADS_MAX = 1_000;

/**
 * Leases due deliveries of the worker's handlers, oldest first, at most one open delivery per
 * (handler, key) at a time, after expanding due placeholders into per-handler deliveries. The
 * candidate query is shared; how it is locked and leased (one statement, or a window then one
 * statement) is the dialect's `claim`.
 */
export class ClaimOp {
  constructor(private readonly ctx: StoreContext) {}

  /** Per set of subscriptions (a worker claims with the same set every time): its SQL parts. */
  private readonly shapes = new Map<string, ClaimShape>();
  /** The claim's select list (the same for every claim of this store). */
  private columns: SqlText | null = null;

  async claim(request: ClaimRequest): Promise<ClaimedDelivery[]> {
    if (request.handlers.length === 0 || request.limit <= 0) return [];
    const shape = this.shapeOf(request);
    if (shape.names.length === 0) return [];
    await this.expand(request);
    const { ctx } = this;
    const d = ctx.dialect;
    const token = randomUUID();
    const { names, candidates } = shape;
    const handlerLimits =
      d.claimPerHandler && names.length > 1 ? firstLimits(shape, request.limit) : undefined;
    // The lease's owner and token are this claim's; only its deadline (the database's clock)
    // comes back per row.
    this.columns ??= sql`d.id, d.handler, d.attempts, ${d.timeOut(raw('d.lease_until'))} AS lease_until, d.event_seq, ${ctx.eventColumns('e')}`;
    const rows = await d.run(
      () =>
        d.claim(
          {
            handlers: names,
            limit: request.limit,
            leaseMs: request.leaseMs,
            owner: request.workerId,
            token,
            handlerLimits,
          },
          candidates,
          this.columns!,
        ),
      d.claimRunOptions,
    );
    if (!inClaimOrder(rows)) rows.sort(byClaimOrder);
    if (handlerLimits) {
      const got = names.map(() => 0);
      for (const r of rows) {
        const i = names.indexOf(String(r.handler));
        if (i >= 0) got[i]++;
      }
      shape.last = { limits: handlerLimits, got };
    }
    const owner = request.workerId;
    // One statement sets every lease's deadline to the same value: its rows share one Date, as
    // they share the owner and the token (a lease is replaced on renewal, never changed).
    let leaseUntil: Date | null = null;
    let leaseUntilValue: unknown;
    return rows.map((r) => {
      const id = String(r.id);
      if (leaseUntil === null || r.lease_until !== leaseUntilValue) {
        leaseUntilValue = r.lease_until;
        leaseUntil = d.readTime(r.lease_until);
      }
      return {
        id,
        handler: String(r.handler),
        attempt: Number(r.attempts),
        event: ctx.toEvent(r),
        lease: { deliveryId: id, owner, token, leaseUntil },
      };
    });
  }

  /**
   * The claim's candidate query for one set of subscriptions. Kept with its shape, so the same
   * function serves every claim of a worker: called with the same options, it gives the same text
   * (see `ClaimCandidates`).
   */
  private candidatesOf(names: string[], unexpanded: SqlText): ClaimCandidates {
    const { ctx } = this;
    const d = ctx.dialect;
    // The handler names are parameters in a text fixed per worker (they are the same on every
    // claim): an IN list where the dialect plans each claim with its values (MariaDB, SQLite),
    // one index range per name on PostgreSQL, whose prepared claim may run a generic plan (see
    // `perHandler`).
    // A key with a delivery running takes no other one (docs/guarantees.md, Guarantees 6). Only a replayed dead
    // letter not claimed since (a pending row with `lease_until` set, see `DeadLetterOps`) can be
    // older than a running delivery of its key, so only such a row looks for one: the common
    // candidate decides from the claim index's own columns, as before. The running one, if any, is
    // the first later open delivery of the key that is not such a replayed row (it was claimed
    // while those were dead, and blocks every later one), so the lookup reads the key from the
    // candidate on, stopping there, instead of every open delivery of the key.
    // On PostgreSQL and MariaDB that delivery may be leased by a claim that has not committed
    // (this statement still reads it pending): the locking claim takes its row lock as well, so
    // the replayed row passes only if that row can be locked now and, locked, is not running
    // (PostgreSQL rechecks the newest version of a row a claim committed meanwhile; MariaDB's
    // locking read reads it). A claim holding it makes this one skip the replayed row this time.
    // Whichever takes the lock first wins: a claim of that delivery skips it while it is held.
    const later = sql`r.handler = c.handler AND r.event_key = c.event_key AND r.status IN ('pending', 'leased') AND r.event_seq > c.event_seq AND (r.lease_until IS NULL OR r.status = 'leased')`;
    const olderOpen = sql`NOT EXISTS (
    SELECT 1 FROM ${ctx.D} p
    WHERE p.handler = c.handler AND p.event_key = c.event_key AND p.status IN ('pending', 'leased') AND p.event_seq < c.event_seq)`;
    const due = (t: string) =>
      sql`((${raw(t)}.status = 'pending' AND ${raw(t)}.available_at <= ${d.now}) OR (${raw(t)}.status = 'leased' AND ${raw(t)}.lease_until <= ${d.now}))`;
    const where: CandidateWhere = (handler, within, lock, heads) =>
      sql`WHERE ${handler} AND c.status IN ('pending', 'leased')${within ? sql` AND c.id IN (${list(within)})` : EMPTY}
  AND ${due('c')}
  AND (c.event_key IS NULL OR (${heads ? this.keyHead(heads, olderOpen, due('b')) : olderOpen}${unexpanded}
  AND (c.lease_until IS NULL OR c.status = 'leased' OR NOT EXISTS (
    SELECT 1 FROM ${ctx.D} r
    WHERE ${later}) OR EXISTS (
    SELECT 1 FROM ${ctx.D} x
    WHERE x.id = (SELECT r.id FROM ${ctx.D} r WHERE ${later} ORDER BY r.event_seq LIMIT 1)
      AND (x.status = 'pending' OR x.lease_until <= ${d.now}) ${lock ? d.skipLocked : EMPTY}))))`;
    if (d.claimPerHandler) return this.perHandler(names, where);
    const nameList = list(names);
    return ({
      limit,
      lock,
      within,
      columns,
    }) => sql`SELECT ${columns ?? raw('c.id')} FROM ${ctx.D} c${within ? sql` ${d.byId}` : EMPTY}
${where(sql`c.handler IN (${nameList})`, within, lock)}
ORDER BY c.event_seq
LIMIT ${Math.floor(limit)} ${lock ? d.skipLocked : EMPTY}`;
  }

  /**
   * Whether a keyed candidate is its key's head (no older open delivery of the handler's key; what
   * `olderOpen` tests with one probe of the key index per candidate). The claim walks the
   * handler's open deliveries oldest first; on a keyed backlog whose heads all run, every other
   * row of every key fails that probe, and a claim that finds nothing walked the whole backlog
   * probing each (bench/RESULTS.md runs 14 and 21: 20,000 open over 200 keys, 19,800 probes,
   * 58,600 buffers, ~90 ms). So the probe serves only the oldest `probes` due deliveries (the
   * bound: the event_seq of the next one, read from the claim index, once, when the first keyed
   * row comes up). Rows leased and running fail the due test before any probe and do not count;
   * rows other claims hold locked do (read as due here, passed over by SKIP LOCKED after the
   * test): a worker's claims in flight walk over each other's, hence a bound of several limits.
   * Past the bound, the heads of the handler's keys are read once, one descent of the key index
   * per key (a loose index scan: the first open delivery of the first key after the last one),
   * and a candidate is a head if it is among them (a hashed lookup). The same snapshot as the
   * probe, the same answer: a row is its key's head iff its event_seq is the least of its key's
   * open deliveries. Only for at most `KEY_HEADS_MAX` keys (counted first, by the same scan
   * stopped one key later): reading 10,000 keys costs more than the probes it saves (240 ms), so
   * with more the claim probes on. A claim of free heads (10,000 keys of one event) stops within
   * the bound and never reads the keys; one whose key heads run reads each key twice (the count,
   * the set) instead of probing each of its rows.
   */
  private keyHead(heads: KeyHeads, olderOpen: SqlText, due: SqlText): SqlText {
    const D = this.ctx.D;
    const { name, probes } = heads;
    const open = raw(`status IN ('pending', 'leased')`);
    // The heads of the handler's keys in key order, one descent of the key index each. They carry
    // the handler, and a candidate is tested with its own: a set built for another handler of the
    // LATERAL (a recheck of a row another transaction changed reuses the subquery's state, and on
    // a plan where nothing rebuilds it for the next name) then fails closed, passing no row.
    const keyHeads = sql`WITH RECURSIVE k AS (
    (SELECT handler, event_key, event_seq FROM ${D} WHERE handler = ${name} AND ${open} AND event_key IS NOT NULL ORDER BY event_key, event_seq LIMIT 1)
    UNION ALL
    SELECT n.handler, n.event_key, n.event_seq FROM k CROSS JOIN LATERAL (
      SELECT o.handler, o.event_key, o.event_seq FROM ${D} o WHERE o.handler = ${name} AND o.${open} AND o.event_key > k.event_key ORDER BY o.event_key, o.event_seq LIMIT 1) n)
    SELECT handler, event_key, event_seq FROM k`;
    return sql`(CASE WHEN c.event_seq <= COALESCE((
    SELECT b.event_seq FROM ${D} b WHERE b.handler >= ${name} AND b.handler <= ${name} AND b.${open} AND ${due}
    ORDER BY b.handler, b.event_seq OFFSET ${probes} LIMIT 1), 9223372036854775807)
    OR c.handler NOT IN (SELECT ${name} FROM (${keyHeads} LIMIT ${raw(String(KEY_HEADS_MAX + 1))}) m HAVING count(*) <= ${raw(String(KEY_HEADS_MAX))}) THEN ${olderOpen}
  ELSE (c.handler, c.event_key, c.event_seq) IN (${keyHeads}) END)`;
  }

  /**
   * PostgreSQL runs the claim as a prepared statement, whose generic plan (after five runs) does
   * not know the handler's name: with `c.handler = $1 ORDER BY c.event_seq`, the unique
   * `(event_seq, handler)` index serves the order as well as the claim index, and the planner,
   * estimating a share of 1 / (distinct handlers) for any name and preferring that index's heap
   * correlation, walks it with the name as a filter — reading every other handler's open
   * deliveries older than the worker's (all of them when the worker's handlers have none open).
   * Here each handler reads only its own part of the claim index `(handler, event_seq)`: the name
   * is written as a range (`>= AND <=`, the same rows: the column's collation is deterministic),
   * so it is no equality the planner would fold the order's `c.handler` into, and the order
   * `(c.handler, c.event_seq)` is one only that index gives without a sort. One handler: that
   * query. Several: the oldest `limit` due candidates across the handlers, so no handler waits
   * behind another's backlog, in two steps of one statement:
   * - `s`: one such query per handler (a LATERAL over the names), each with its own first limit
   *   (`handlerLimits`, a share of the limit; see `firstLimits`) and SKIP LOCKED: it locks those
   *   rows for the statement's duration, skipping rows other claims hold, as before;
   * - more of a handler only if it may hold more of the oldest `limit`: it filled its first limit
   *   (`got >= lim`), and fewer than `limit` of `s` come at or before its last row in claim order
   *   (`rank`, by (event_seq, handler)). Then up to `limit - rank` more of its candidates after
   *   that row (the same query, same locks). Any row of the oldest `limit` across the handlers'
   *   candidates that `s` missed is among those (it comes after its handler's last row of `s` and
   *   has fewer than `limit` rows before it), so the result is the oldest `limit` of both parts:
   *   what checking `limit` candidates of every handler gave (run 19), with about `limit` checks
   *   when the first limits fit (bench/RESULTS.md, run 20).
   * Rows a part locked that the final limit leaves out stay locked until the statement ends, as
   * in run 19; per-key order does not depend on them (a later row of a key is blocked by the
   * earlier open row itself, and the second part's rows come after the first part's of their
   * handler, still open in this statement's snapshot).
   */
  private perHandler(names: string[], where: CandidateWhere): ClaimCandidates {
    const { ctx } = this;
    const d = ctx.dialect;
    if (names.length === 1) {
      const name = names[0];
      return ({ limit, lock, within, columns }) =>
        sql`SELECT ${columns ?? raw('c.id')} FROM ${ctx.D} c
${where(sql`c.handler >= ${name} AND c.handler <= ${name}`, within, lock, keyHeads(sql`${name}`, limit))}
ORDER BY c.handler, c.event_seq
LIMIT ${Math.floor(limit)} ${lock ? d.skipLocked : EMPTY}`;
    }
    // The limits are parameters of a fixed text (the VALUES rows), so a worker's claims stay one
    // prepared statement whatever they are.
    const scan = (
      bound: SqlText,
      limit: SqlText,
      lock: boolean,
      within: unknown[] | undefined,
      claimLimit: number,
    ) =>
      sql`SELECT c.* FROM ${ctx.D} c
${where(sql`c.handler >= h.name AND c.handler <= h.name${bound}`, within, lock, keyHeads(raw('h.name'), claimLimit))}
ORDER BY c.handler, c.event_seq
LIMIT ${limit} ${lock ? d.skipLocked : EMPTY}`;
    return ({ limit, lock, within, columns, handlerLimits }) => {
      const n = Math.floor(limit);
      const values = join(
        names.map((name, i) => {
          const first = Math.floor(handlerLimits?.[i] ?? n);
          return sql`(${name}::text, ${Math.max(1, Math.min(n, first))}::int)`;
        }),
        ', ',
      );
      // Planner costs, so the server keeps the generic plan (bench/RESULTS.md, run 20): the limit
      // is a sub-select, unknown to custom plans as to the generic one (as the placeholder's
      // literal in `unexpandedBlocker` is known to both), and the first part has a limit it never
      // reaches (each handler's first limit is at most the limit), which custom plans know and
      // cost as a full read, the generic plan as a tenth (the planner's guess for an unknown
      // limit).
      const all = sql`(SELECT ${n}::bigint)`;
      return sql`WITH s AS (SELECT c.*, h.lim AS first_limit FROM (VALUES ${values}) h(name, lim) CROSS JOIN LATERAL (${scan(EMPTY, raw('h.lim'), lock, within, n)}) c LIMIT ${n * names.length}),
f AS (SELECT o.handler AS name, max(o.event_seq) AS after, count(*) AS got, min(o.first_limit) AS lim, max(o.pos) AS rank
  FROM (SELECT s.handler, s.event_seq, s.first_limit, row_number() OVER (ORDER BY s.event_seq, s.handler) AS pos FROM s) o GROUP BY o.handler LIMIT ${raw(String(names.length))})
SELECT ${columns ?? raw('c.id')} FROM (SELECT * FROM s UNION ALL SELECT c.*, 0 FROM f h CROSS JOIN LATERAL (${scan(raw(' AND c.event_seq > h.after'), sql`GREATEST(${all} - h.rank, 0)`, lock, within, n)}) c
WHERE h.got >= h.lim AND h.rank < ${all}) c
ORDER BY c.event_seq, c.handler
LIMIT ${all}`;
    };
  }

  /** The SQL parts of a set of subscriptions, built once per distinct set. */
  private shapeOf(request: ClaimRequest): ClaimShape {
    const key = JSON.stringify(request.handlers.map((h) => [h.name, h.types]));
    let shape = this.shapes.get(key);
    if (!shape) {
      const names = [...new Set(request.handlers.map((h) => h.name))];
      const literal = this.ctx.dialect.claimPerHandler === true && names.length > 1;
      const candidates = this.candidatesOf(names, this.unexpandedBlocker(request, literal));
      shape = { names, candidates };
      // Sets come from code (a worker has one); the bound only guards against a caller that
      // makes a new one per claim.
      if (this.shapes.size >= 100) this.shapes.clear();
      this.shapes.set(key, shape);
    }
    return shape;
  }

  /**
   * Per-key order across expansion (docs/guarantees.md, Guarantees 6): an earlier event of the key that is still an
   * unexpanded delivery of a type the handler subscribes to will become one of the handler's
   * deliveries, so it blocks the later ones just as that delivery would. This covers placeholders
   * this claim did not get to expand (a backlog beyond EXPAND_BATCH, or not due yet) and those
   * another worker is expanding right now: its row is locked (SKIP LOCKED skipped it) but, until
   * that transaction commits, the committed placeholder is still what this statement reads, and
   * afterwards the expanded copies are. Served by the (handler, event_key, event_seq) index.
   */
  private unexpandedBlocker(request: ClaimRequest, literal: boolean): SqlText {
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
    // PostgreSQL's several-handler claim writes the placeholder's name as a literal, not a
    // parameter: its generic plan would estimate a parameter as a common handler (a costlier
    // check per candidate than the custom plans' "few or none"), and a generic plan that looks
    // dearer than the custom ones is never chosen, so that claim was planned afresh on every call
    // (bench/RESULTS.md, run 20). The other claims keep the parameter (their plans as before).
    return sql` AND NOT EXISTS (
    SELECT 1 FROM ${this.ctx.D} u
    WHERE u.handler = ${literal ? UNEXPANDED_LITERAL : sql`${UNEXPANDED_HANDLER}`} AND u.event_key = c.event_key AND u.status IN ('pending', 'leased') AND u.event_seq < c.event_seq AND (${which}))`;
  }

  /**
   * Turns due unexpanded deliveries of types this worker handles into one delivery per handler,
   * oldest first, keeping the event's position so per-key order holds across the expansion.
   * Placeholders not due yet stay as they are until they are (they still hold their key, see
   * `unexpandedBlocker`), so a backlog of scheduled events never delays the due ones.
   */
  private async expand(request: ClaimRequest): Promise<void> {
    const { ctx } = this;
    // Cheap unlocked probe first, so the common case costs one statement and no transaction, and
    // after an empty probe none at all for a while (an app-clock throttle, not a due time).
    if (performance.now() < ctx.expandQuietUntil) return;
    const byType = new Map<string, string[]>();
    for (const h of request.handlers) {
      for (const type of h.types)
        byType.set(type, [...new Set([...(byType.get(type) ?? []), h.name])]);
    }
    if (byType.size === 0) return;
    const select = (lock: SqlText) =>
      sql`SELECT id, event_type FROM ${ctx.D} WHERE handler = ${UNEXPANDED_HANDLER} AND status = 'pending' AND available_at <= ${ctx.dialect.now} AND event_type IN (${list([...byType.keys()])}) ORDER BY event_seq LIMIT ${raw(String(EXPAND_BATCH))} ${lock}`;
    const probe = await ctx.one(select(EMPTY));
    if (probe.rows.length === 0) {
      ctx.expandQuietUntil = performance.now() + EXPAND_PROBE_QUIET_MS;
      return;
    }
    const d = ctx.dialect;
    const D = ctx.D;
    await d.run(
      function* (): Plan<void> {
        const { rows } = yield select(d.skipLocked);
        if (rows.length === 0) return;
        const copies: SqlText[] = [];
        for (const row of rows) {
          for (const handler of byType.get(String(row.event_type)) ?? []) {
            copies.push(
              sql`SELECT ${d.uuid(newId())}, event_seq, event_type, event_key, ${handler}, status, attempts, available_at, errors FROM ${D} WHERE id = ${row.id}`,
            );
          }
        }
        yield sql`INSERT INTO ${D} (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors) ${join(copies, ' UNION ALL ')}`;
        yield sql`DELETE FROM ${D} WHERE ${d.anyOf(
          raw('id'),
          rows.map((r) => r.id),
          'uuid',
        )}`;
      },
      { transaction: true, deadlockRetries: 3 },
    );
  }
}

function keyHeads(name: SqlText, limit: number): KeyHeads {
  return { name, probes: Math.max(KEY_PROBES_PER_LIMIT * Math.floor(limit), KEY_PROBES_MIN) };
}

/**
 * How many candidates each handler of a several-handler claim checks first (PostgreSQL, see
 * `perHandler`): its share of the last claim plus a spare, doubled when it got all it was given
 * (it may have more); an even share of the limit plus the spare on a worker's first claim and
 * after a claim that found nothing. Only a cost: a claim whose first candidates fall short of the
 * limit takes the rest from the handlers that filled theirs, in the same statement.
 */
function firstLimits(shape: ClaimShape, limit: number): number[] {
  const n = Math.floor(limit);
  const handlers = shape.names.length;
  const spare = Math.max(2, Math.ceil(n / (4 * handlers)));
  const last = shape.last;
  if (!last || last.got.every((g) => g === 0))
    return shape.names.map(() => Math.min(n, Math.ceil(n / handlers) + spare));
  return last.got.map((got, i) =>
    Math.max(
      1,
      Math.min(n, got >= last.limits[i] ? Math.max(got + spare, 2 * last.limits[i]) : got + spare),
    ),
  );
}

/** Rows in claim order: oldest event first, then by handler name (one event, several handlers). */
function byClaimOrder(a: Row, b: Row): number {
  return (
    Number(a.event_seq) - Number(b.event_seq) || String(a.handler).localeCompare(String(b.handler))
  );
}

function inClaimOrder(rows: readonly Row[]): boolean {
  for (let i = 1; i < rows.length; i++) if (byClaimOrder(rows[i - 1], rows[i]) > 0) return false;
  return true;
}
