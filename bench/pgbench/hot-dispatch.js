#!/usr/bin/env node
/* global require, module, process, console, performance, setTimeout */
/*
 * Issue 27 spike (bench/RESULTS.md run 18): can the claim's UPDATE be HOT on PostgreSQL, and is
 * dispatch cheaper for it? No library involved; tables `hot_<variant>_events` / `_deliveries` in
 * a database of its own (PGDATABASE, default hot_spk):
 *   a     schema 3 as lib/stores/typeorm/dialects/postgres/ddl.ts creates it: the claim index
 *         INCLUDEs status and lease_until and both partial indexes have `status IN (…)` as their
 *         predicate, so the claim (status, attempts, lease_owner, lease_token, lease_until) is
 *         never HOT.
 *   hNN   the same columns and rows; no index reads status or lease_until (`deliveries` holds open
 *         work only, pending or leased, so schema 3's predicates exclude nothing: dropped), the
 *         claim index `(handler, event_seq) INCLUDE (id, available_at, event_key)`, the key index
 *         `WHERE event_key IS NOT NULL`, and the table `WITH (fillfactor = NN)` (NN = 100: none).
 *         The claim sets the same columns; none is indexed, so its UPDATE can be HOT when the
 *         new version fits on the page.
 * The claim is the library's statement (ops/claim.ts + dialects/postgres claim, one handler); H's
 * differs only where its text named status for the partial indexes: the `status IN ('pending',
 * 'leased')` conjuncts (always true) are gone, and `c.available_at <= now` is added in front
 * (true of every claimable row, leased ones included, and checkable in the index). The ack is the
 * library's fenced DELETE (deleteLeased), the same for both.
 * Usage:
 *   node hot-dispatch.js setup                       create the tables (drops them first)
 *   node hot-dispatch.js prepare <v> [events] [keys] empty, append `events` (transactions of 10)
 *   node hot-dispatch.js <v> [events] [loops] [batch] drain; one JSON line: events/s, backend
 *        CPU µs/event (/proc/<pid>/schedstat of the loops' backends), WAL bytes/event (LSN diff,
 *        cluster-wide; and from pg_waldump, only records of this database + their commits),
 *        n_tup_upd / n_tup_hot_upd of the deliveries table during the drain, statements.
 *   node hot-dispatch.js steady <v> [seconds] [loops] [batch]   the same while hot-steady.sh
 *        appends: claims for `seconds` (5 ms pause after an empty claim), then until caught up.
 */
const { Client } = require('pg');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const { randomUUID } = require('node:crypto');
const base = require('./onerow-dispatch.js');

const conn = { host: '127.0.0.1', user: 'postgres', database: process.env.PGDATABASE || 'hot_spk' };
const { HANDLER, TYPE, PAYLOAD } = base;
const NOW = "date_trunc('milliseconds', now())";
const VARIANTS = ['a', 'h50', 'h70', 'h80', 'h90', 'h100'];
const T = (v) => ({ E: `hot_${v}_events`, D: `hot_${v}_deliveries` });
const fillfactor = (v) => (v === 'a' ? null : Number(v.slice(1)));

function ddl(v) {
  const { E, D } = T(v);
  const ff = fillfactor(v);
  const h = ff !== null;
  return [
    `DROP TABLE IF EXISTS ${E}, ${D}`,
    `CREATE TABLE ${E} (
  seq BIGSERIAL PRIMARY KEY,
  id UUID NOT NULL,
  type VARCHAR(255) NOT NULL,
  event_key VARCHAR(512),
  payload JSON NOT NULL,
  headers JSON NOT NULL,
  occurred_at TIMESTAMPTZ(3) NOT NULL,
  available_at TIMESTAMPTZ(3) NOT NULL,
  created_at TIMESTAMPTZ(3) NOT NULL DEFAULT now(),
  CONSTRAINT ${E}_id_uq UNIQUE (id)
)`,
    `CREATE INDEX ${E}_available_idx ON ${E} (available_at)`,
    `CREATE TABLE ${D} (
  id UUID PRIMARY KEY,
  event_seq BIGINT NOT NULL,
  event_type VARCHAR(255) NOT NULL,
  event_key VARCHAR(512),
  handler VARCHAR(255) NOT NULL,
  status VARCHAR(16) NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  available_at TIMESTAMPTZ(3) NOT NULL,
  lease_owner VARCHAR(255),
  lease_token VARCHAR(64),
  lease_until TIMESTAMPTZ(3),
  reason VARCHAR(16),
  errors JSONB NOT NULL DEFAULT '[]',
  done_at TIMESTAMPTZ(3),
  CONSTRAINT ${D}_event_handler_uq UNIQUE (event_seq, handler)
)${h && ff < 100 ? ` WITH (fillfactor = ${ff})` : ''}`,
    h
      ? `CREATE INDEX ${D}_claim_idx ON ${D} (handler, event_seq) INCLUDE (id, available_at, event_key)`
      : `CREATE INDEX ${D}_claim_idx ON ${D} (handler, event_seq) INCLUDE (id, status, available_at, lease_until, event_key) WHERE status IN ('pending', 'leased')`,
    h
      ? `CREATE INDEX ${D}_key_idx ON ${D} (handler, event_key, event_seq) WHERE event_key IS NOT NULL`
      : `CREATE INDEX ${D}_key_idx ON ${D} (handler, event_key, event_seq) WHERE status IN ('pending', 'leased') AND event_key IS NOT NULL`,
  ];
}

/** H's claim: the library's statement without the status conjuncts of the partial indexes. */
function hClaimSql(D, E, limit) {
  const later = `r.handler = c.handler AND r.event_key = c.event_key AND r.event_seq > c.event_seq AND (r.lease_until IS NULL OR r.status = 'leased')`;
  return `WITH c AS MATERIALIZED (SELECT c.id FROM ${D} c
WHERE c.handler IN ($1) AND c.available_at <= ${NOW}
  AND ((c.status = 'pending' AND c.available_at <= ${NOW}) OR (c.status = 'leased' AND c.lease_until <= ${NOW}))
  AND (c.event_key IS NULL OR (NOT EXISTS (
    SELECT 1 FROM ${D} p
    WHERE p.handler = c.handler AND p.event_key = c.event_key AND p.event_seq < c.event_seq) AND NOT EXISTS (
    SELECT 1 FROM ${D} u
    WHERE u.handler = '*' AND u.event_key = c.event_key AND u.event_seq < c.event_seq AND ((c.handler IN ($2) AND u.event_type IN ($3))))
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

const claimSql = (v, limit) => {
  const { E, D } = T(v);
  return v === 'a' ? base.claimSql(D, E, limit) : hClaimSql(D, E, limit);
};

/** CPU time the backend has run, ns (first field of /proc/<pid>/schedstat). */
const cpuNs = (pid) => Number(fs.readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);

async function loop(v, batch, id, stats) {
  const c = new Client(conn);
  await c.connect();
  const pid = (await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
  const owner = `worker-${id}`;
  const claim = { name: `hot_claim_${v}`, text: claimSql(v, batch) };
  const ack = { name: `hot_ack_${v}`, text: base.ackSql(T(v).D) };
  const cpu0 = cpuNs(pid);
  // Until the backlog is delivered (keyed: a claim may come back empty while the other loop
  // holds every free key head; it claims again at once).
  while (stats.delivered < stats.events) {
    if (stats.until && performance.now() > stats.until && stats.caughtUp) break;
    const token = randomUUID();
    const r = await c.query({ ...claim, values: base.claimParams(owner, token) });
    stats.statements++;
    stats.claims++;
    const rows = r.rows;
    if (rows.length === 0) {
      if (stats.until) {
        // Steady mode: caught up with the appender; poll again shortly.
        stats.empty++;
        if (performance.now() > stats.until) stats.caughtUp = true;
        await new Promise((res) => setTimeout(res, 5));
        continue;
      }
      if (++stats.empty > 100000) throw new Error('no progress');
      continue;
    }
    for (const row of rows) JSON.parse(row.payload);
    const fence = `${token.length}:${token}${owner}`;
    const a = await c.query({ ...ack, values: [rows.map((x) => x.id), rows.map(() => fence)] });
    stats.statements++;
    if (a.rowCount !== rows.length) throw new Error(`acked ${a.rowCount} of ${rows.length}`);
    stats.delivered += rows.length;
  }
  stats.cpuNs += cpuNs(pid) - cpu0;
  await c.end();
}

/** WAL of this database between two LSNs: records touching its relations and their commits. */
function walOf(dbOid, from, to) {
  return new Promise((resolve, reject) => {
    const p = spawn('/usr/lib/postgresql/15/bin/pg_waldump', [
      '-p',
      '/var/lib/postgresql/15/main/pg_wal',
      '-s',
      from,
      '-e',
      to,
    ]);
    let buf = '';
    const out = { rec: 0, tot: 0, records: 0, fpi: 0, commits: 0 };
    const txs = new Set();
    const commits = [];
    const re = /len \(rec\/tot\):\s*(\d+)\/\s*(\d+), tx:\s*(\d+)/;
    const mine = ` rel 1663/${dbOid}/`;
    const line = (l) => {
      const m = re.exec(l);
      if (!m) return;
      if (l.includes(mine)) {
        out.rec += +m[1];
        out.tot += +m[2];
        out.records++;
        if (l.includes('FPW')) out.fpi++;
        txs.add(m[3]);
      } else if (l.startsWith('rmgr: Transaction') && l.includes('COMMIT')) {
        commits.push([m[3], +m[2]]);
      }
    };
    p.stdout.on('data', (d) => {
      buf += d;
      const lines = buf.split('\n');
      buf = lines.pop();
      lines.forEach(line);
    });
    p.stderr.on('data', (d) => (out.err = String(d).trim().slice(0, 200)));
    p.on('error', reject);
    p.on('close', () => {
      line(buf);
      for (const [tx, tot] of commits)
        if (txs.has(tx)) {
          out.tot += tot;
          out.rec += tot;
          out.commits++;
        }
      resolve(out);
    });
  });
}

async function drain(v, events, loops, batch, seconds = 0) {
  const { D } = T(v);
  const c = new Client(conn);
  await c.connect();
  const q = async (s) => (await c.query(s)).rows[0];
  const dbOid = (await q('SELECT oid FROM pg_database WHERE datname = current_database()')).oid;
  const st = `SELECT n_tup_upd::int AS upd, n_tup_hot_upd::int AS hot, n_tup_del::int AS del FROM pg_stat_user_tables WHERE relname = '${D}'`;
  const before = await q(st);
  const lsn0 = (await q('SELECT pg_current_wal_lsn() AS l')).l;
  const t0 = performance.now();
  const stats = {
    events: seconds > 0 ? Infinity : events,
    until: seconds > 0 ? t0 + seconds * 1000 : 0,
    caughtUp: false,
    statements: 0,
    claims: 0,
    empty: 0,
    delivered: 0,
    cpuNs: 0,
  };
  await Promise.all(Array.from({ length: loops }, (_, i) => loop(v, batch, i, stats)));
  const s = (performance.now() - t0) / 1000;
  const lsn1 = (await q('SELECT pg_current_wal_lsn() AS l')).l;
  const walAll = Number((await q(`SELECT pg_wal_lsn_diff('${lsn1}', '${lsn0}') AS b`)).b);
  const wal = await walOf(dbOid, lsn0, lsn1);
  // The loops' backends flushed their table counters when they ended; wait for the reports.
  let after = before;
  for (let i = 0; i < 20; i++) {
    await c.query('SELECT pg_stat_clear_snapshot()');
    after = await q(st);
    if (after.del - before.del >= stats.delivered) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const pages = (await q(`SELECT pg_relation_size('${D}') / 8192 AS p`)).p;
  await c.end();
  const out = {
    variant: v,
    events,
    loops,
    batch,
    seconds: +s.toFixed(3),
    eps: Math.round(stats.delivered / s),
    cpuUsPerEvent: +(stats.cpuNs / 1000 / stats.delivered).toFixed(1),
    walAllPerEvent: Math.round(walAll / stats.delivered),
    walPerEvent: Math.round(wal.tot / stats.delivered),
    walNoFpiPerEvent: Math.round(wal.rec / stats.delivered),
    fpi: wal.fpi,
    ...(wal.err ? { walErr: wal.err } : {}),
    upd: after.upd - before.upd,
    hot: after.hot - before.hot,
    pages: Number(pages),
    statements: stats.statements,
    claims: stats.claims,
    empty: stats.empty,
    delivered: stats.delivered,
  };
  if (seconds) out.steady = seconds;
  console.log(JSON.stringify(out));
  if (!seconds && stats.delivered !== events)
    throw new Error(`delivered ${stats.delivered} of ${events}`);
}

/** Empties both tables, appends `events` events with their deliveries (transactions of 10). */
async function prepare(v, events, keys) {
  const { E, D } = T(v);
  const c = new Client(conn);
  await c.connect();
  const q = (s) => c.query(s);
  const key = keys > 0 ? `'k' || (g % ${keys})` : 'NULL';
  await q(`TRUNCATE ${D}, ${E}`);
  const append = `WITH ev AS (INSERT INTO ${E} (id, type, event_key, payload, headers, occurred_at, available_at)
       SELECT spk_uuid7(), '${TYPE}', ${key}, '${PAYLOAD}'::json, '{}'::json, now(), ${NOW} FROM generate_series(i * 10, i * 10 + 9) g
       RETURNING seq, type, event_key, available_at)
     INSERT INTO ${D} (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors)
       SELECT spk_uuid7(), seq, type, event_key, '${HANDLER}', 'pending', 0, available_at, '[]' FROM ev`;
  await q(`DO $$ BEGIN FOR i IN 0..${events / 10 - 1} LOOP ${append}; COMMIT; END LOOP; END $$`);
  for (const t of [E, D]) await q(`VACUUM ANALYZE ${t}`);
  await q('CHECKPOINT');
  await c.end();
}

async function setup() {
  const c = new Client(conn);
  await c.connect();
  await c.query(`CREATE OR REPLACE FUNCTION spk_uuid7() RETURNS uuid LANGUAGE sql VOLATILE AS $$
  SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) PLACING
    substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
    52, 1), 53, 1), 'hex')::uuid
$$`);
  await c.query(
    'CREATE TABLE IF NOT EXISTS hot_orders (id UUID PRIMARY KEY, total INTEGER NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now())',
  );
  for (const v of VARIANTS) for (const s of ddl(v)) await c.query(s);
  await c.end();
}

async function main() {
  const [cmd, ...args] = process.argv.slice(2);
  if (cmd === 'setup') await setup();
  else if (cmd === 'prepare') {
    const [v, events = 20000, keys = 0] = args;
    await prepare(v, +events, +keys);
  } else if (cmd === 'steady') {
    // Drain while something appends (hot-steady.sh): `seconds`, then until caught up.
    const [v, seconds = 20, loops = 2, batch = 100] = args;
    await drain(v, 0, +loops, +batch, +seconds);
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
module.exports = { claimSql, T, conn, prepare, VARIANTS, ddl };
