#!/usr/bin/env node
/* global require, process, console */
/*
 * Run 15 (b): EXPLAIN (ANALYZE, BUFFERS) of the claim statements over a prepared backlog, each run
 * 7 times as a named prepared statement (the plan cache picks custom or generic plans as the
 * library's statements get), inside a transaction rolled back, so the backlog stays as prepared.
 * Prints the execution times and the 7th plan.
 *   node onerow-explain.js <s3|l1|l2> [events=20000] [retained=0]
 */
const { Client } = require('pg');
const d = require('./onerow-dispatch.js');

async function main() {
  const [variant, events = 20000, retained = 0] = process.argv.slice(2);
  await d.prepare(variant, +events, +retained, 0);
  const c = new Client(d.conn);
  await c.connect();
  const stmt = {
    s3: [d.claimSql('spk3_deliveries', 'spk3_events', 100), d.claimParams('w', 't')],
    l1: [d.MATERIALISE_PENDING, [100, ...d.MAP]],
    l2: [d.MATERIALISE_LEASE, [100, ...d.MAP, [d.HANDLER], 'w', 't', d.LEASE_MS]],
  }[variant];
  const lit = (v) =>
    Array.isArray(v)
      ? `ARRAY[${v.map((x) => `'${x}'`).join(',')}]::text[]`
      : typeof v === 'number'
        ? String(v)
        : `'${v}'`;
  const types = {
    s3: 'text,text,text,text,text,float8',
    l1: 'int,text[],text[]',
    l2: 'int,text[],text[],text[],text,text,float8',
  }[variant];
  await c.query(`PREPARE x(${types}) AS ${stmt[0]}`);
  const times = [];
  let plan = '';
  for (let i = 0; i < 7; i++) {
    await c.query('BEGIN');
    const r = await c.query(`EXPLAIN (ANALYZE, BUFFERS) EXECUTE x(${stmt[1].map(lit).join(', ')})`);
    await c.query('ROLLBACK');
    plan = r.rows.map((x) => x['QUERY PLAN']).join('\n');
    times.push(Number(/Execution Time: ([\d.]+)/.exec(plan)[1]));
  }
  console.log(`${variant} events=${events} retained=${retained} execution ms: ${times.join(', ')}`);
  console.log(plan);
  await c.end();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
