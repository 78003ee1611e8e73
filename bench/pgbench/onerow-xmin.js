#!/usr/bin/env node
/* global require, process, console, setTimeout, performance */
/*
 * Run 15 (c): what a long-running writer transaction does to materialisation. An appender commits
 * one event every 20 ms (own transaction each); one claimer materialises (l2 statement of
 * onerow-dispatch.js) every 10 ms and acknowledges what it got; from 1 s to 1 s + hold a writer
 * transaction that appended an event itself stays open (it holds xmin back). Latency = the claim
 * that returned an event − the append's commit, in ms, for events appended during the hold and
 * outside it.
 *   node onerow-xmin.js [hold seconds=5] [fallback bound ms, negative: none=-1]
 * XMIN_WRITER_DB=postgres: the writer is in another database and only takes a transaction id
 * (SELECT pg_current_xact_id()): xids, and so xmin, are the cluster's.
 */
const { Client } = require('pg');
const d = require('./onerow-dispatch.js');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pct = (xs, p) => {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]);
};

async function main() {
  const hold = Number(process.argv[2] ?? 5) * 1000;
  const bound = Number(process.argv[3] ?? -1);
  await d.prepare('l2', 0, 0, 0);
  const other = process.env.XMIN_WRITER_DB;
  const [app, mat, writer] = [
    new Client(d.conn),
    new Client(d.conn),
    new Client(other ? { ...d.conn, database: other } : d.conn),
  ];
  await Promise.all([app.connect(), mat.connect(), writer.connect()]);
  const appended = new Map(); // seq -> { at, during }
  const delivered = new Map(); // seq -> at
  const t0 = performance.now();
  const now = () => performance.now() - t0;
  let holding = false;
  let appending = true;
  const insert = (c) =>
    c.query(
      `INSERT INTO spk1_events (id, type, event_key, payload, headers, occurred_at, available_at) VALUES (gen_random_uuid(), '${d.TYPE}', NULL, '${d.PAYLOAD}'::json, '{}'::json, now(), date_trunc('milliseconds', now())) RETURNING seq`,
    );
  const appender = (async () => {
    while (appending) {
      const r = await insert(app);
      appended.set(Number(r.rows[0].seq), { at: now(), during: holding });
      await sleep(20);
    }
  })();
  const writing = (async () => {
    await sleep(1000);
    await writer.query('BEGIN');
    if (other) await writer.query('SELECT pg_current_xact_id()');
    else await writer.query('INSERT INTO spk_orders (id, total) VALUES (gen_random_uuid(), 1)');
    const r = other ? null : await insert(writer);
    holding = true;
    await sleep(hold);
    await writer.query('COMMIT');
    holding = false;
    if (r) appended.set(Number(r.rows[0].seq), { at: now(), during: 'writer' });
  })();
  let statements = 0;
  const owner = 'xmin-claimer';
  const claimer = (async () => {
    while (now() < hold + 6000) {
      const token = require('node:crypto').randomUUID();
      let rows = [];
      const m = await mat.query({
        name: 'm',
        text: d.MATERIALISE_LEASE,
        values: [100, ...d.MAP, [d.HANDLER], owner, token, d.LEASE_MS],
      });
      statements++;
      rows = m.rows.filter((r) => r.id !== null);
      if (bound >= 0 && m.rows[0].n < 100) {
        const a = await mat.query({
          name: 'a',
          text: d.MATERIALISE_AHEAD,
          values: [100, ...d.MAP, [d.HANDLER], owner, token, d.LEASE_MS, bound],
        });
        statements++;
        rows = rows.concat(a.rows.filter((r) => r.id !== null));
      }
      const at = now();
      for (const r of rows) delivered.set(Number(r.event_seq), at);
      if (rows.length > 0) {
        const fence = `${token.length}:${token}${owner}`;
        await mat.query({
          name: 'ack',
          text: d.ackSql('spk1_deliveries'),
          values: [rows.map((r) => r.id), rows.map(() => fence)],
        });
      }
      await sleep(10);
      if (now() > hold + 3000) appending = false;
    }
  })();
  await Promise.all([appender, writing, claimer]);
  const lat = { during: [], outside: [], writer: [] };
  let lost = 0;
  const missing = [];
  for (const [seq, a] of appended) {
    const at = delivered.get(seq);
    if (at === undefined) {
      lost++;
      missing.push({ seq, ...a });
      continue;
    }
    lat[a.during === 'writer' ? 'writer' : a.during ? 'during' : 'outside'].push(at - a.at);
  }
  const { rows } = await mat.query('SELECT count(*)::int AS n FROM spk1_ahead');
  // Materialised pending (this harness runs no claim of pending rows): an event whose transaction
  // started after the materialiser's (its due time then follows the materialiser's now()).
  const pending = await mat.query(
    `SELECT array_agg(event_seq) AS s FROM spk1_deliveries WHERE status = 'pending'`,
  );
  console.log(
    JSON.stringify({
      hold,
      bound,
      appended: appended.size,
      delivered: delivered.size,
      undelivered: lost,
      missing: missing.map((m) => ({ seq: m.seq, at: Math.round(m.at), during: m.during })),
      statements,
      aheadLeft: rows[0].n,
      pendingSeqs: pending.rows[0].s ?? [],
      duringHold: {
        n: lat.during.length,
        p50: pct(lat.during, 50),
        p95: pct(lat.during, 95),
        max: pct(lat.during, 100),
      },
      outside: {
        n: lat.outside.length,
        p50: pct(lat.outside, 50),
        p95: pct(lat.outside, 95),
        max: pct(lat.outside, 100),
      },
      writersEvent: lat.writer.map(Math.round),
    }),
  );
  await Promise.all([app.end(), mat.end(), writer.end()]);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
