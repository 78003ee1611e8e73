#!/usr/bin/env node
/* global require, module, process, console, performance */
/*
 * Run 15 (b): dispatch without the library — concurrent claim loops (own connection each, named
 * prepared statements), 100 a claim, each batch acknowledged by the library's fenced DELETE, until
 * the backlog is drained. Tables from onerow-setup.sql.
 *   s3  schema 3: the appends wrote the deliveries; the claim is the library's statement (claim
 *       index, UPDATE pending → leased, events joined by seq).
 *   l1  spike, two steps: materialise up to `batch` events as pending deliveries (cursor row locked
 *       SKIP LOCKED: one materialiser at a time, the others go on), then the s3 claim.
 *   l2  spike, one step: materialise `batch` events directly as deliveries leased to this claimer
 *       (key heads and due events only; others pending), returning them with their events (read
 *       by the same scan); the s3 claim only when that came back short.
 * Usage: node onerow-dispatch.js <s3|l1|l2> [events=20000] [loops=2] [batch=100] [keys=0]
 * Prints one JSON line: variant, events, seconds, events/s, statements.
 * Prepare the backlog first: node onerow-dispatch.js prepare <s3|l1|l2> [events] [retained] [keys]
 */
const { Client } = require('pg');

const conn = { host: '127.0.0.1', user: 'postgres', database: process.env.PGDATABASE || 'test' };
const HANDLER = 'Handlers.onOrder';
const TYPE = 'order.created';
const NOW = "date_trunc('milliseconds', now())";
const PAYLOAD =
  '{"orderId":"0f8fad5b-d9cb-469f-a165-70867728950e","total":1,"lines":[{"sku":"A-1","qty":1}]}';
const LEASE_MS = 30000;
/** l2: the fallback's bound (ms; negative: no fallback), run 15 (c). */
const AHEAD_MS = Number(process.env.ONEROW_AHEAD_MS ?? 1000);

/** The library's claim (ops/claim.ts candidates + dialects/postgres claim), one handler. */
function claimSql(D, E, limit) {
  const later = `r.handler = c.handler AND r.event_key = c.event_key AND r.status IN ('pending', 'leased') AND r.event_seq > c.event_seq AND (r.lease_until IS NULL OR r.status = 'leased')`;
  return `WITH c AS MATERIALIZED (SELECT c.id FROM ${D} c
WHERE c.handler IN ($1) AND c.status IN ('pending', 'leased')
  AND ((c.status = 'pending' AND c.available_at <= ${NOW}) OR (c.status = 'leased' AND c.lease_until <= ${NOW}))
  AND (c.event_key IS NULL OR (NOT EXISTS (
    SELECT 1 FROM ${D} p
    WHERE p.handler = c.handler AND p.event_key = c.event_key AND p.status IN ('pending', 'leased') AND p.event_seq < c.event_seq) AND NOT EXISTS (
    SELECT 1 FROM ${D} u
    WHERE u.handler = '*' AND u.event_key = c.event_key AND u.status IN ('pending', 'leased') AND u.event_seq < c.event_seq AND ((c.handler IN ($2) AND u.event_type IN ($3))))
  AND (c.lease_until IS NULL OR c.status = 'leased' OR NOT EXISTS (
    SELECT 1 FROM ${D} r
    WHERE ${later}) OR EXISTS (
    SELECT 1 FROM ${D} x
    WHERE x.id = (SELECT r.id FROM ${D} r WHERE ${later} ORDER BY r.event_seq LIMIT 1)
      AND (x.status = 'pending' OR x.lease_until <= ${NOW}) FOR UPDATE SKIP LOCKED))))
ORDER BY c.event_seq
LIMIT ${limit} FOR UPDATE SKIP LOCKED),
u AS (
  UPDATE ${D} AS d
  SET status = 'leased', attempts = d.attempts + 1, lease_owner = $4, lease_token = $5, lease_until = (${NOW} + $6::double precision * interval '1 millisecond')
  WHERE d.id = ANY(ARRAY(SELECT id FROM c))
  RETURNING d.*
)
SELECT d.id, d.handler, d.attempts, (extract(epoch from d.lease_until) * 1000)::float8 AS lease_until, d.event_seq, e.id AS event_id, e.type AS type, e.event_key AS event_key, e.payload::text AS payload, e.headers::text AS headers, (extract(epoch from e.occurred_at) * 1000)::float8 AS occurred_at, (extract(epoch from e.available_at) * 1000)::float8 AS available_at
FROM u AS d
JOIN (SELECT * FROM ${E} WHERE seq = ANY(ARRAY(SELECT event_seq FROM u))) AS e ON e.seq = d.event_seq`;
}
const claimParams = (owner, token) => [HANDLER, HANDLER, TYPE, owner, token, LEASE_MS];

/** The library's ack (dialects/postgres deleteLeased). */
function ackSql(D) {
  return `WITH l AS (
  SELECT * FROM unnest($1::uuid[], $2::text[]) AS l(id, fence)
)
DELETE FROM ${D} AS d
WHERE d.id = ANY(ARRAY(SELECT id FROM l))
  AND (d.id, length(d.lease_token) || ':' || d.lease_token || d.lease_owner) IN (SELECT id, fence FROM l)
  AND d.status || '' = 'leased' AND d.lease_until > ${NOW}
RETURNING d.id`;
}

/**
 * The events final for materialisation: after the cursor, appended by transactions below the
 * statement snapshot's xmin (every one of them has ended, so nothing can appear behind them), not
 * already materialised ahead (run 15 (c); read once per statement, usually empty).
 */
const FINAL = `(e.tx, e.seq) > (SELECT tx, seq FROM cur) AND e.tx < pg_snapshot_xmin(pg_current_snapshot())
    AND e.seq <> ALL (ARRAY(SELECT seq FROM spk1_ahead))`;
/**
 * Run 15 (c), the fallback while a long writer holds xmin back: events after the cursor appended by
 * transactions at or above xmin that are visible (so committed) and older than $8 ms are
 * materialised ahead of the cursor and remembered in spk1_ahead, which the cursor path skips and
 * forgets as the cursor passes them.
 */
const AHEAD = `(e.tx, e.seq) > (SELECT tx, seq FROM cur) AND e.tx >= pg_snapshot_xmin(pg_current_snapshot())
    AND e.created_at < now() - $8::double precision * interval '1 millisecond'
    AND NOT EXISTS (SELECT 1 FROM spk1_ahead a WHERE a.seq = e.seq)`;
/** Cursor advance: to the last event read, forgetting the events materialised ahead up to it. */
const ADVANCE = `adv AS (
  UPDATE spk1_cursor c SET tx = l.tx, seq = l.seq
  FROM (SELECT tx, seq FROM ev ORDER BY tx DESC, seq DESC LIMIT 1) l
  WHERE c.id = 1
  RETURNING c.tx, c.seq
), fgt AS (
  DELETE FROM spk1_ahead a USING adv WHERE (a.tx, a.seq) <= (adv.tx, adv.seq)
)`;
const REMEMBER = `ah AS (
  INSERT INTO spk1_ahead (seq, tx) SELECT seq, tx FROM ev
)`;

/**
 * l1: materialise up to $1 events as pending deliveries, one per handler of the type ($2 types,
 * $3 handlers, the claimer's map), a placeholder '*' for types it does not know; advance the
 * cursor. SKIP LOCKED: if another claimer is materialising, nothing (locked = 0).
 */
const MATERIALISE_PENDING = `WITH cur AS MATERIALIZED (
  SELECT tx, seq FROM spk1_cursor WHERE id = 1 FOR UPDATE SKIP LOCKED
), ev AS MATERIALIZED (
  SELECT e.tx, e.seq, e.type, e.event_key, e.available_at FROM spk1_events e
  WHERE ${FINAL}
  ORDER BY e.tx, e.seq LIMIT $1
), ins AS (
  INSERT INTO spk1_deliveries (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors)
  SELECT spk_uuid7(), ev.seq, ev.type, ev.event_key, COALESCE(m.handler, '*'), 'pending', 0, ev.available_at, '[]'
  FROM ev LEFT JOIN unnest($2::text[], $3::text[]) AS m(type, handler) ON m.type = ev.type
  ORDER BY ev.tx, ev.seq
  ON CONFLICT (event_seq, handler) DO NOTHING
), ${ADVANCE}
SELECT (SELECT count(*) FROM cur)::int AS locked, (SELECT count(*) FROM ev)::int AS n`;

/**
 * l2: materialise up to $1 events; the deliveries of this claimer's handlers ($4) that are due and
 * the head of their (handler, key) are inserted already leased to it ($5 owner, $6 token) and come
 * back with their events; the rest pending. The cursor row is locked (waits for a materialiser
 * running, whose statement is short). If another materialiser advanced it after this statement's
 * snapshot was taken (after a wait, or just before the lock), the locked row is newer than the
 * snapshot (fresh = false): the events after it are still final, but the snapshot cannot see the
 * other's deliveries, so no keyed event is taken as its key's head — all of those go pending, for
 * the claim (a new snapshot) to lease.
 */
const materialiseLease = (ahead) => `WITH cur AS MATERIALIZED (
  SELECT tx, seq, (tx, seq) = (SELECT tx, seq FROM spk1_cursor WHERE id = 1) AS fresh FROM spk1_cursor
  WHERE id = 1
  FOR UPDATE
), ev AS MATERIALIZED (
  SELECT e.* FROM spk1_events e
  WHERE ${ahead ? AHEAD : FINAL}
  ORDER BY e.tx, e.seq LIMIT $1
), dv AS MATERIALIZED (
  SELECT ev.*, COALESCE(m.handler, '*') AS handler,
    (m.handler = ANY($4::text[]) AND ev.available_at <= ${NOW}
      AND (ev.event_key IS NULL
        OR ((SELECT fresh FROM cur) AND row_number() OVER (PARTITION BY m.handler, ev.event_key ORDER BY ev.tx, ev.seq) = 1
          AND NOT EXISTS (SELECT 1 FROM spk1_deliveries p
            WHERE p.handler = m.handler AND p.event_key = ev.event_key AND p.status IN ('pending', 'leased'))))) IS TRUE AS lease
  FROM ev LEFT JOIN unnest($2::text[], $3::text[]) AS m(type, handler) ON m.type = ev.type
), ins AS (
  INSERT INTO spk1_deliveries (id, event_seq, event_type, event_key, handler, status, attempts, available_at, lease_owner, lease_token, lease_until, errors)
  SELECT spk_uuid7(), seq, type, event_key, handler,
    CASE WHEN lease THEN 'leased' ELSE 'pending' END, CASE WHEN lease THEN 1 ELSE 0 END, available_at,
    CASE WHEN lease THEN $5 END, CASE WHEN lease THEN $6 END,
    CASE WHEN lease THEN ${NOW} + $7::double precision * interval '1 millisecond' END, '[]'
  FROM dv ORDER BY tx, seq
  ON CONFLICT (event_seq, handler) DO NOTHING
  RETURNING id, event_seq, handler, status, attempts, lease_until
), ${ahead ? REMEMBER : ADVANCE}
SELECT s.locked, s.fresh, s.n, x.* FROM (SELECT (SELECT count(*) FROM cur)::int AS locked, (SELECT fresh FROM cur) AS fresh, (SELECT count(*) FROM ev)::int AS n) s
LEFT JOIN (
  SELECT i.id, i.handler, i.attempts, (extract(epoch from i.lease_until) * 1000)::float8 AS lease_until, i.event_seq, dv.id AS event_id, dv.type, dv.event_key, dv.payload::text AS payload, dv.headers::text AS headers, (extract(epoch from dv.occurred_at) * 1000)::float8 AS occurred_at, (extract(epoch from dv.available_at) * 1000)::float8 AS available_at
  FROM ins i JOIN dv ON dv.seq = i.event_seq AND dv.handler = i.handler
  WHERE i.status = 'leased'
) x ON true`;

const MATERIALISE_LEASE = materialiseLease(false);
const MATERIALISE_AHEAD = materialiseLease(true);
const MAP = [[TYPE], [HANDLER]];
/** CHECK_KEYS=1: check per-key order across the loops of this process (keyed backlogs). */
const CHECK_KEYS = process.env.CHECK_KEYS === '1';
const held = new Set();
const lastSeq = new Map();

async function loop(variant, batch, id, stats) {
  const c = new Client(conn);
  await c.connect();
  const owner = `worker-${id}`;
  const D = variant === 's3' ? 'spk3_deliveries' : 'spk1_deliveries';
  const E = variant === 's3' ? 'spk3_events' : 'spk1_events';
  const claim = { name: `spk_claim_${variant}`, text: claimSql(D, E, batch) };
  const ack = { name: `spk_ack_${variant}`, text: ackSql(D) };
  let idle = 0;
  for (;;) {
    const token = require('node:crypto').randomUUID();
    let rows = [];
    let more = false;
    if (variant === 'l1') {
      const m = await c.query({
        name: 'spk_mat_pending',
        text: MATERIALISE_PENDING,
        values: [batch, ...MAP],
      });
      stats.statements++;
      stats.materialise++;
      // Locked by another claimer, or it found events: there may be more.
      more = m.rows[0].locked === 0 || m.rows[0].n > 0;
    }
    if (variant === 'l2') {
      const m = await c.query({
        name: 'spk_mat_lease',
        text: MATERIALISE_LEASE,
        values: [batch, ...MAP, [HANDLER], owner, token, LEASE_MS],
      });
      stats.statements++;
      stats.materialise++;
      stats.scanned += m.rows[0].n;
      if (m.rows[0].fresh === false) stats.stale++;
      more = m.rows[0].n > 0;
      rows = m.rows.filter((r) => r.id !== null);
      if (m.rows[0].n < batch && AHEAD_MS >= 0) {
        // Caught up with xmin: events a long writer holds behind it, if old enough.
        const a = await c.query({
          name: 'spk_mat_ahead',
          text: MATERIALISE_AHEAD,
          values: [batch - rows.length, ...MAP, [HANDLER], owner, token, LEASE_MS, AHEAD_MS],
        });
        stats.statements++;
        stats.ahead += a.rows[0].n;
        if (a.rows[0].locked === 1) rows = rows.concat(a.rows.filter((r) => r.id !== null));
      }
    }
    if (rows.length < batch) {
      const r = await c.query({ ...claim, values: claimParams(owner, token) });
      stats.statements++;
      rows = rows.concat(r.rows);
    }
    if (rows.length === 0) {
      if (!more && ++idle >= 2) break;
      continue;
    }
    idle = 0;
    // The handler: parse what a dispatcher would (the payload), nothing else.
    for (const r of rows) JSON.parse(r.payload);
    if (CHECK_KEYS) {
      // Per-key order: no key leased by two loops at once, each key's events in append order.
      for (const r of rows) {
        if (r.event_key === null) continue;
        if (held.has(r.event_key)) throw new Error(`key ${r.event_key} leased twice`);
        if ((lastSeq.get(r.event_key) ?? 0) > Number(r.event_seq))
          throw new Error(`key ${r.event_key} out of order`);
        held.add(r.event_key);
        lastSeq.set(r.event_key, Number(r.event_seq));
      }
    }
    const fence = `${token.length}:${token}${owner}`;
    const a = await c.query({ ...ack, values: [rows.map((r) => r.id), rows.map(() => fence)] });
    stats.statements++;
    if (a.rowCount !== rows.length) throw new Error(`acked ${a.rowCount} of ${rows.length}`);
    stats.delivered += rows.length;
    if (CHECK_KEYS) for (const r of rows) held.delete(r.event_key);
  }
  await c.end();
}

async function drain(variant, events, loops, batch) {
  const stats = { statements: 0, materialise: 0, stale: 0, scanned: 0, ahead: 0, delivered: 0 };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: loops }, (_, i) => loop(variant, batch, i, stats)));
  const s = (performance.now() - t0) / 1000;
  const out = {
    variant,
    events,
    loops,
    batch,
    seconds: +s.toFixed(3),
    eps: Math.round(stats.delivered / s),
    ...stats,
  };
  console.log(JSON.stringify(out));
  if (stats.delivered !== events) throw new Error(`delivered ${stats.delivered} of ${events}`);
}

/**
 * Empties the deliveries and the events beyond `retained` (kept delivered history, made once with
 * `retained`), then appends `events` events in transactions of 10 (schema 3: with their
 * deliveries), VACUUM ANALYZE, CHECKPOINT.
 */
async function prepare(variant, events, retained, keys) {
  const c = new Client(conn);
  await c.connect();
  const q = (s) => c.query(s);
  const E = variant === 's3' ? 'spk3_events' : 'spk1_events';
  const D = variant === 's3' ? 'spk3_deliveries' : 'spk1_deliveries';
  const key = keys > 0 ? `'k' || (g % ${keys})` : 'NULL';
  const have = Number(
    (await q(`SELECT count(*) AS n FROM ${E} WHERE id::text LIKE '00000000-%'`)).rows[0].n,
  );
  await q(`TRUNCATE ${D}`);
  if (have !== retained) {
    await q(`TRUNCATE ${E}`);
    if (retained > 0) {
      // Delivered history: ids 00000000-…, no deliveries, behind the cursor.
      await q(`INSERT INTO ${E} (id, type, event_key, payload, headers, occurred_at, available_at)
        SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, '${TYPE}', 'h' || (g % 1000), '${PAYLOAD}'::json, '{}'::json, now() - interval '1 day', now() - interval '1 day'
        FROM generate_series(1, ${retained}) g`);
    }
  } else {
    await q(`DELETE FROM ${E} WHERE id::text NOT LIKE '00000000-%'`);
  }
  if (variant !== 's3') {
    await q(
      `UPDATE spk1_cursor SET tx = COALESCE((SELECT tx FROM spk1_events ORDER BY tx DESC, seq DESC LIMIT 1), '0'), seq = COALESCE((SELECT max(seq) FROM spk1_events), 0) WHERE id = 1`,
    );
    await q('TRUNCATE spk1_ahead');
  }
  const append =
    variant === 's3'
      ? `WITH ev AS (INSERT INTO ${E} (id, type, event_key, payload, headers, occurred_at, available_at)
           SELECT spk_uuid7(), '${TYPE}', ${key}, '${PAYLOAD}'::json, '{}'::json, now(), ${NOW} FROM generate_series(i * 10, i * 10 + 9) g
           RETURNING seq, type, event_key, available_at)
         INSERT INTO ${D} (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors)
           SELECT spk_uuid7(), seq, type, event_key, '${HANDLER}', 'pending', 0, available_at, '[]' FROM ev`
      : `INSERT INTO ${E} (id, type, event_key, payload, headers, occurred_at, available_at)
           SELECT spk_uuid7(), '${TYPE}', ${key}, '${PAYLOAD}'::json, '{}'::json, now(), ${NOW} FROM generate_series(i * 10, i * 10 + 9) g`;
  await q(`DO $$ BEGIN FOR i IN 0..${events / 10 - 1} LOOP ${append}; COMMIT; END LOOP; END $$`);
  for (const t of [E, D, 'spk1_cursor']) await q(`VACUUM ANALYZE ${t}`);
  await q('CHECKPOINT');
  await c.end();
}

async function main() {
  const [cmd, ...args] = process.argv.slice(2);
  if (cmd === 'prepare') {
    const [variant, events = 20000, retained = 0, keys = 0] = args;
    await prepare(variant, +events, +retained, +keys);
  } else {
    const [events = 20000, loops = 2, batch = 100] = args;
    await drain(cmd, +events, +loops, +batch);
  }
}

if (require.main === module) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
module.exports = {
  MATERIALISE_PENDING,
  claimSql,
  claimParams,
  MATERIALISE_LEASE,
  MATERIALISE_AHEAD,
  MAP,
  HANDLER,
  TYPE,
  PAYLOAD,
  LEASE_MS,
  ackSql,
  prepare,
  conn,
};
