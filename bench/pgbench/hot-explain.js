#!/usr/bin/env node
/* global require, process, console */
/*
 * Run 18: EXPLAIN (ANALYZE, BUFFERS, WAL) of one claim of 100 with 20,000 open deliveries of which
 * the oldest 200 are leased (two claims of 100 by the variant's own statement, not acknowledged),
 * per variant, as a prepared statement (7 executions: the first five custom plans, then the
 * generic one), each in a transaction rolled back so every run sees the same rows.
 *   node hot-explain.js [keys=0] [variants=a,h70] [full]   (`full`: print the plans)
 */
const { Client } = require('pg');
const { randomUUID } = require('node:crypto');
const { claimSql, conn, prepare } = require('./hot-dispatch.js');
const base = require('./onerow-dispatch.js');

async function main() {
  const keys = Number(process.argv[2] ?? 0);
  const variants = (process.argv[3] ?? 'a,h70').split(',');
  const full = process.argv[4] === 'full';
  for (const v of variants) {
    await prepare(v, 20000, keys);
    const c = new Client(conn);
    await c.connect();
    for (let i = 0; i < 2; i++) {
      const r = await c.query({
        text: claimSql(v, 100),
        values: base.claimParams('holder', randomUUID()),
      });
      if (r.rowCount !== 100) throw new Error(`leased ${r.rowCount}`);
    }
    await c.query(
      `PREPARE hot_x(text, text, text, text, text, float8) AS ${claimSql(v, 100).replace(/\$(\d)/g, '$$$1')}`,
    );
    for (let i = 1; i <= 7; i++) {
      await c.query('BEGIN');
      const r = await c.query(
        `EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF) EXECUTE hot_x('${base.HANDLER}', '${base.HANDLER}', '${base.TYPE}', 'w', '${randomUUID()}', 30000)`,
      );
      await c.query('ROLLBACK');
      const lines = r.rows.map((x) => x['QUERY PLAN']);
      const exec = lines.find((l) => l.startsWith('Execution Time'));
      const top = lines.find((l) => /Buffers:/.test(l));
      const walLine = lines.find((l) => /WAL:/.test(l));
      console.log(`keys ${keys} ${v} run ${i}: ${exec}; ${top?.trim()}; ${walLine?.trim() ?? ''}`);
      if (full && (i === 1 || i === 7)) console.log(lines.join('\n'));
    }
    await c.end();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
