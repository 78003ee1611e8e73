/*
 * Orchestrator: runs every variant of the chosen scenarios in its own child process, interleaved
 * (round 1: a b c …, round 2: b c … a, …), then prints medians and paired ratios (each ratio is
 * taken within one round, where both runs saw the same machine load, then the median of those).
 *
 *   node -r ../node_modules/ts-node/register/transpile-only src/run.ts [s1] [append-tx] [sql-append-tx] [prisma-append-tx] [commit-wake] [inbox] [s2] [s3] [dispatch] [wake] [wakecost] [scale] [o11y]
 *   BENCH_ROUNDS=3 (default); BENCH_S2_VARIANTS=ours-sqlite,pgboss (etc.) picks variants
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { envInt, median, RESULT_MARK } from './common';

type Row = Record<string, any>;

interface Scenario {
  id: string;
  file: string;
  title: string;
  variants: string[];
  /** [ours, baseline] pairs reported as ratios, optionally with issue 9's target ratio. */
  pairs: Array<[string, string] | [string, string, number]>;
  metrics: Array<{ key: string; label: string; higherIsBetter: boolean }>;
  /** One variant's time limit (child process), default 150 s. */
  timeoutMs?: number;
}

/** The dispatch scenario's history run is compared with our empty-history run of this config. */
const HISTORY_CONFIG = process.env.BENCH_DISPATCH_HISTORY_CONFIG ?? 'tuned';

const SCENARIOS: Scenario[] = [
  {
    id: 's1',
    file: 's1-append.ts',
    title: 'S1 — append in one business transaction, PostgreSQL, N=5000 (events/s)',
    variants: ['ours', 'handrolled', 'ours-batch', 'pgboss-tx', 'pgboss'],
    pairs: [
      ['ours', 'handrolled'],
      ['ours', 'pgboss-tx'],
      ['ours', 'pgboss'],
      ['ours-batch', 'handrolled'],
    ],
    metrics: [{ key: 'eventsPerSec', label: 'events/s', higherIsBetter: true }],
  },
  {
    id: 's2',
    file: 's2-delivery.ts',
    title:
      'S2 — delivery of a 5000-event backlog, one worker, concurrency 10, no-op handler (events/s)',
    variants: [
      'ours-postgres',
      'pgboss',
      'ours-redis',
      'bullmq',
      'ours-mariadb',
      'ours-sqlite-wal',
      // 'ours-sqlite' (TypeORM's default rollback journal) is fsync-bound at ~100–250 events/s,
      // i.e. 20–60 s per run: add it with BENCH_S2_VARIANTS when wanted (see RESULTS.md).
    ],
    pairs: [
      ['ours-postgres', 'pgboss'],
      ['ours-mariadb', 'pgboss'],
      ['ours-sqlite', 'pgboss'],
      ['ours-sqlite-wal', 'pgboss'],
      ['ours-redis', 'bullmq'],
      ['ours-postgres', 'bullmq'],
    ],
    metrics: [{ key: 'eventsPerSec', label: 'events/s', higherIsBetter: true }],
  },
  {
    id: 's3',
    file: 's3-latency.ts',
    title: 'S3 — latency committed append → handler start, 50 events/s for 10 s (ms)',
    variants: ['ours-pg-100', 'pgboss', 'ours-pg-20', 'bullmq'],
    pairs: [
      ['ours-pg-100', 'pgboss'],
      ['ours-pg-20', 'pgboss'],
      ['ours-pg-100', 'bullmq'],
      ['ours-pg-20', 'bullmq'],
    ],
    metrics: [
      { key: 'p50', label: 'p50 ms', higherIsBetter: false },
      { key: 'p99', label: 'p99 ms', higherIsBetter: false },
    ],
  },
  {
    id: 'dispatch',
    file: 'dispatch.ts',
    title: `Dispatch — drain of ${envInt('BENCH_DISPATCH_N', 20_000)} pre-filled events, no key, no-op handler; history run with ${envInt('BENCH_DISPATCH_HISTORY_N', 1_000_000)} delivered events retained (events/s)`,
    // Ours and the peers alternate; rotated each round.
    variants: [
      'ours-pg-defaults',
      'raw-pg',
      'stmt-pg',
      'ours-pg-tuned',
      'graphile',
      'ours-pg-batch',
      'ours-redis-defaults',
      'bullmq',
      'ours-redis-tuned',
      'raw-lua',
      'ours-mariadb-defaults',
      'pgboss',
      'ours-mariadb-tuned',
      'ours-pg-history',
      'ours-pg-history-empty',
      'ours-sqlite-defaults',
      'ours-sqlite-tuned',
    ],
    pairs: [
      ['ours-pg-defaults', 'raw-pg', 0.6],
      ['ours-pg-tuned', 'raw-pg', 0.6],
      ['stmt-pg', 'raw-pg'],
      ['ours-pg-defaults', 'stmt-pg'],
      ['ours-pg-defaults', 'graphile', 1.0],
      ['ours-pg-tuned', 'graphile', 1.0],
      ['ours-pg-batch', 'graphile', 1.0],
      ['ours-pg-batch', 'ours-pg-defaults'],
      ['stmt-pg', 'graphile'],
      // Opt-in (BENCH_DISPATCH_VARIANTS): graphile-worker with one job row per event.
      ['ours-pg-batch', 'graphile-1'],
      ['ours-pg-defaults', 'graphile-1'],
      ['graphile-1', 'graphile'],
      ['ours-pg-batch', 'graphile-1-local'],
      ['ours-pg-defaults', 'graphile-1-local'],
      ['ours-pg-defaults', 'pgboss', 3.0],
      ['ours-pg-tuned', 'pgboss', 3.0],
      ['ours-pg-defaults', 'ours-pg-tuned', 0.8],
      ['ours-pg-history', 'ours-pg-history-empty', 0.9],
      ['ours-pg-history', `ours-pg-${HISTORY_CONFIG}`],
      ['ours-redis-defaults', 'bullmq', 3.0],
      ['ours-redis-tuned', 'bullmq', 3.0],
      ['ours-redis-defaults', 'raw-lua'],
      ['ours-redis-tuned', 'raw-lua'],
      ['ours-redis-defaults', 'ours-redis-tuned'],
      ['ours-mariadb-defaults', 'ours-pg-defaults', 0.5],
      ['ours-mariadb-tuned', 'ours-pg-tuned', 0.5],
      ['ours-mariadb-defaults', 'ours-mariadb-tuned'],
      ['ours-sqlite-defaults', 'ours-pg-defaults'],
      ['ours-sqlite-tuned', 'ours-pg-tuned'],
      ['ours-sqlite-defaults', 'ours-sqlite-tuned'],
      // Opt-in: the build before a change, extracted to .lib-before (RESULTS.md, run 11).
      ['ours-pg-defaults', 'ours-pg-defaults@.lib-before/lib'],
      ['ours-pg-defaults@.lib-before/lib', 'raw-pg', 0.6],
    ],
    metrics: [{ key: 'eventsPerSec', label: 'events/s', higherIsBetter: true }],
    // Filling 1 000 000 history rows and draining at default settings take minutes under load.
    timeoutMs: 900_000,
  },
  {
    id: 'wake',
    file: 'wakeups.ts',
    title: `Wake-ups — cross-process latency committed append → handler start: producer process (no handler for the type) at ${envInt('BENCH_WAKE_RATE', 50)} events/s for ${envInt('BENCH_WAKE_SECONDS', 10)} s, then a burst of ${envInt('BENCH_WAKE_BURST', 1_000)} from 8 appenders; worker process at default settings (ms)`,
    variants: ['latency-pg-on', 'latency-pg-off', 'latency-redis-on', 'latency-redis-off'],
    pairs: [
      ['latency-pg-on', 'latency-pg-off'],
      ['latency-redis-on', 'latency-redis-off'],
    ],
    metrics: [
      { key: 'p50', label: 'p50 ms', higherIsBetter: false },
      { key: 'p99', label: 'p99 ms', higherIsBetter: false },
      { key: 'burstP50', label: 'burst p50 ms', higherIsBetter: false },
      { key: 'burstP99', label: 'burst p99 ms', higherIsBetter: false },
    ],
  },
  {
    id: 'append-tx',
    file: 'append-tx.ts',
    title: `append-tx — one business transaction per event (BEGIN; INSERT business row; + nothing / a raw outbox INSERT / outbox.append; COMMIT), PostgreSQL, 1 client × ${envInt('BENCH_APPEND_TX_N_1', 2_000)} and 8 clients × ${envInt('BENCH_APPEND_TX_N_8', 1_000)} transactions (transactions/s)`,
    variants: ['business-1', 'raw-1', 'ours-1', 'business-8', 'raw-8', 'ours-8'],
    pairs: [
      // Both share the business baseline, so this is issue 9's ratio of ratios:
      // ((business + append) / business) / ((business + raw INSERT) / business).
      ['ours-1', 'raw-1', 0.9],
      ['ours-8', 'raw-8', 0.9],
      ['ours-1', 'business-1'],
      ['raw-1', 'business-1'],
      ['ours-8', 'business-8'],
      ['raw-8', 'business-8'],
      // Opt-in variants (BENCH_APPEND_TX_VARIANTS): what the wake-up NOTIFY costs.
      ['ours-1', 'ours-nowake-1'],
      ['ours-8', 'ours-nowake-8'],
      ['ours-nowake-1', 'raw-1'],
      ['ours-nowake-8', 'raw-8'],
      // Opt-in: the build before a change, extracted to .lib-before (RESULTS.md, run 11).
      ['ours-1', 'ours-1@.lib-before/lib'],
      ['ours-8', 'ours-8@.lib-before/lib'],
      ['ours-1@.lib-before/lib', 'raw-1', 0.9],
      ['ours-8@.lib-before/lib', 'raw-8', 0.9],
    ],
    metrics: [
      { key: 'txPerSec', label: 'tx/s', higherIsBetter: true },
      { key: 'cpuUsPerTx', label: 'Node CPU µs/tx', higherIsBetter: false },
      { key: 'pgCpuUsPerTx', label: 'PG CPU µs/tx', higherIsBetter: false },
    ],
  },
  {
    id: 'prisma-append-tx',
    file: 'prisma-append-tx.ts',
    title: `prisma-append-tx — one Prisma interactive transaction per event ($transaction: INSERT business row; + nothing / a raw outbox INSERT / outbox.append({ tx }) with prismaExecutor), PostgreSQL, 1 client × ${envInt('BENCH_PRISMA_TX_N_1', 1_000)} and 8 clients × ${envInt('BENCH_PRISMA_TX_N_8', 500)} transactions (transactions/s)`,
    variants: ['business-1', 'raw-1', 'ours-1', 'business-8', 'raw-8', 'ours-8'],
    pairs: [
      ['ours-1', 'raw-1'],
      ['ours-8', 'raw-8'],
      ['ours-1', 'business-1'],
      ['raw-1', 'business-1'],
      ['ours-8', 'business-8'],
      ['raw-8', 'business-8'],
    ],
    metrics: [
      { key: 'txPerSec', label: 'tx/s', higherIsBetter: true },
      { key: 'cpuUsPerTx', label: 'Node CPU µs/tx', higherIsBetter: false },
      { key: 'pgCpuUsPerTx', label: 'PG CPU µs/tx', higherIsBetter: false },
    ],
  },
  {
    id: 'sql-append-tx',
    file: 'sql-append-tx.ts',
    title: `sql-append-tx — one transaction per event through node-postgres (pgExecutor: BEGIN on a held PoolClient) and Drizzle (drizzleExecutor: db.transaction), INSERT business row; + nothing / a raw outbox INSERT on the same client / outbox.append({ tx }), PostgreSQL, 1 client × ${envInt('BENCH_SQL_TX_N_1', 1_000)} and 8 clients × ${envInt('BENCH_SQL_TX_N_8', 500)} transactions (transactions/s)`,
    variants: [
      'pg-business-1',
      'pg-raw-1',
      'pg-ours-1',
      'drizzle-business-1',
      'drizzle-raw-1',
      'drizzle-ours-1',
      'pg-business-8',
      'pg-raw-8',
      'pg-ours-8',
      'drizzle-business-8',
      'drizzle-raw-8',
      'drizzle-ours-8',
    ],
    pairs: [
      ['pg-ours-1', 'pg-raw-1'],
      ['pg-ours-8', 'pg-raw-8'],
      ['drizzle-ours-1', 'drizzle-raw-1'],
      ['drizzle-ours-8', 'drizzle-raw-8'],
      ['pg-raw-1', 'pg-business-1'],
      ['pg-raw-8', 'pg-business-8'],
      ['drizzle-raw-1', 'drizzle-business-1'],
      ['drizzle-raw-8', 'drizzle-business-8'],
      // Opt-in (BENCH_SQL_APPEND_TX_VARIANTS): what the NOTIFY inside the transaction costs.
      ['pg-ours-1', 'pg-ours-nowake-1'],
      ['pg-ours-8', 'pg-ours-nowake-8'],
      ['pg-ours-nowake-1', 'pg-raw-1'],
      ['pg-ours-nowake-8', 'pg-raw-8'],
    ],
    metrics: [
      { key: 'txPerSec', label: 'tx/s', higherIsBetter: true },
      { key: 'statementsPerTx', label: 'statements/tx', higherIsBetter: false },
      { key: 'cpuUsPerTx', label: 'Node CPU µs/tx', higherIsBetter: false },
      { key: 'pgCpuUsPerTx', label: 'PG CPU µs/tx', higherIsBetter: false },
    ],
  },
  {
    id: 'commit-wake',
    file: 'commit-wake.ts',
    title: `commit-wake — one process, an append in the caller's transaction, then COMMIT → handler start: TypeORM (commit subscriber) vs pgExecutor (NOTIFY inside the transaction, delivered at COMMIT); ${envInt('BENCH_COMMIT_WAKE_N', 200)} events one at a time, pollInterval ${envInt('BENCH_COMMIT_WAKE_POLL_MS', 10_000)} ms (ms)`,
    variants: ['typeorm', 'pg'],
    pairs: [['pg', 'typeorm']],
    metrics: [
      { key: 'p50', label: 'p50 ms', higherIsBetter: false },
      { key: 'p95', label: 'p95 ms', higherIsBetter: false },
      { key: 'sentP50', label: 'p50 ms from COMMIT sent', higherIsBetter: false },
      { key: 'statementsPerEvent', label: 'statements/event', higherIsBetter: false },
    ],
  },
  {
    id: 'inbox',
    file: 'inbox.ts',
    title: `inbox — one business transaction per message (BEGIN; inbox claim; INSERT business row; COMMIT), raw claim vs InboxStore.run, PostgreSQL, 1 client × ${envInt('BENCH_INBOX_N_1', 2_000)} and 8 clients × ${envInt('BENCH_INBOX_N_8', 1_000)} messages (messages/s)`,
    variants: ['raw-1', 'ours-1', 'raw-8', 'ours-8'],
    pairs: [
      ['ours-1', 'raw-1', 0.95],
      ['ours-8', 'raw-8', 0.95],
      // Opt-in (BENCH_INBOX_VARIANTS): MariaDB, and the previous build as `ours-1@<dir>`.
      ['ours-maria-1', 'raw-maria-1', 0.95],
      ['ours-maria-8', 'raw-maria-8', 0.95],
      ['ours-1@.lib-before/lib', 'raw-1', 0.95],
      ['ours-8@.lib-before/lib', 'raw-8', 0.95],
      ['ours-maria-1@.lib-before/lib', 'raw-maria-1', 0.95],
      ['ours-maria-8@.lib-before/lib', 'raw-maria-8', 0.95],
    ],
    metrics: [
      { key: 'msgPerSec', label: 'messages/s', higherIsBetter: true },
      { key: 'statementsPerMsg', label: 'statements/message', higherIsBetter: false },
      { key: 'cpuUsPerMsg', label: 'Node CPU µs/message', higherIsBetter: false },
    ],
  },
  {
    id: 'wakecost',
    file: 'wakeups.ts',
    title: `Wake-ups — producer throughput, ${envInt('BENCH_WAKE_APPEND_N', 5_000)} appends of one event each (own transaction), 1 and 8 clients, wake-ups on vs off (events/s)`,
    variants: [
      'append-pg-on-1',
      'append-pg-off-1',
      'append-pg-on-8',
      'append-pg-off-8',
      'append-redis-on-1',
      'append-redis-off-1',
      'append-redis-on-8',
      'append-redis-off-8',
    ],
    pairs: [
      ['append-pg-on-1', 'append-pg-off-1', 0.9],
      ['append-pg-on-8', 'append-pg-off-8', 0.9],
      ['append-redis-on-1', 'append-redis-off-1', 0.9],
      ['append-redis-on-8', 'append-redis-off-8', 0.9],
    ],
    metrics: [{ key: 'eventsPerSec', label: 'events/s', higherIsBetter: true }],
  },
  {
    id: 'scale',
    file: 'scale.ts',
    title: `Scale-out — drain of ${envInt('BENCH_SCALE_N', 20_000)} pre-filled events by 1, 2 and 4 worker processes on one store, no key; no-op handler at default settings, and (-io) a handler waiting ${envInt('BENCH_SCALE_IO_MS', 5)} ms at concurrency ${envInt('BENCH_SCALE_IO_CONCURRENCY', 10)} (events/s)`,
    variants: [
      'pg-1',
      'pg-2',
      'pg-4',
      'redis-1',
      'redis-2',
      'redis-4',
      'pg-1-io',
      'pg-2-io',
      'pg-4-io',
      'redis-1-io',
      'redis-2-io',
      'redis-4-io',
    ],
    pairs: [
      ['pg-2', 'pg-1'],
      ['pg-4', 'pg-1'],
      ['redis-2', 'redis-1'],
      ['redis-4', 'redis-1'],
      ['pg-2-io', 'pg-1-io'],
      ['pg-4-io', 'pg-1-io'],
      ['redis-2-io', 'redis-1-io'],
      ['redis-4-io', 'redis-1-io'],
    ],
    metrics: [{ key: 'eventsPerSec', label: 'events/s', higherIsBetter: true }],
  },
  {
    id: 'o11y',
    file: 'observability.ts',
    title: `Observability — dispatch of ${envInt('BENCH_O11Y_N', 20_000)} pre-filled events, no-op handler, concurrency 100 / batch 100: metrics and tracing on vs off, with and without an OpenTelemetry SDK in the process (events/s)`,
    variants: [
      'pg-on',
      'pg-sdk',
      'pg-off',
      'sqlite-on',
      'sqlite-sdk',
      'sqlite-off',
      'memory-on',
      'memory-sdk',
      'memory-off',
    ],
    pairs: [
      ['pg-on', 'pg-sdk', 0.9],
      ['sqlite-on', 'sqlite-sdk', 0.9],
      ['memory-on', 'memory-sdk', 0.9],
      ['pg-on', 'pg-off'],
      ['sqlite-on', 'sqlite-off'],
      ['memory-on', 'memory-off'],
      ['pg-sdk', 'pg-off'],
      ['memory-sdk', 'memory-off'],
    ],
    metrics: [
      { key: 'eventsPerSec', label: 'events/s', higherIsBetter: true },
      { key: 'cpuUsPerEvent', label: 'CPU µs/event', higherIsBetter: false },
    ],
  },
];

const ROUNDS = envInt('BENCH_ROUNDS', 3);
const fmt = (v: number, digits = 0) =>
  Number.isFinite(v) ? v.toLocaleString('en-US', { maximumFractionDigits: digits }) : 'n/a';

/**
 * `<variant>@<dir>` runs the variant with the library loaded from `<dir>` (BENCH_LIB for that
 * child only), e.g. `ours-mariadb-defaults@.lib-main/lib`: a before/after pair in one run.
 */
function runVariant(s: Scenario, variant: string, round: number): Row | null {
  const [name, lib] = variant.split('@');
  const row = runOne(s, name, round, lib, variant);
  if (row) row.variant = variant;
  return row;
}

function runOne(
  s: Scenario,
  variant: string,
  round: number,
  lib: string | undefined,
  label: string,
): Row | null {
  const started = Date.now();
  // The variant's own hard limit (runMain) fires first; the kill here is the backstop.
  const limitMs = envInt('BENCH_VARIANT_TIMEOUT_MS', s.timeoutMs ?? 150_000);
  const child = spawnSync(
    process.execPath,
    [...process.execArgv, join(__dirname, s.file), variant, String(round)],
    {
      cwd: join(__dirname, '..'),
      env: {
        ...process.env,
        BENCH_VARIANT_TIMEOUT_MS: String(limitMs),
        ...(lib ? { BENCH_LIB: lib } : {}),
      },
      encoding: 'utf8',
      timeout: limitMs + 30_000,
      maxBuffer: 64 * 1024 * 1024,
    },
  );
  const line = (child.stdout ?? '').split('\n').find((l) => l.startsWith(RESULT_MARK));
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  if (child.status !== 0 || !line) {
    console.log(`  ${s.id} round ${round} ${label}: FAILED (exit ${child.status}, ${secs} s)`);
    console.log((child.stderr ?? '').split('\n').slice(-15).join('\n'));
    return null;
  }
  const row = JSON.parse(line.slice(RESULT_MARK.length)) as Row;
  let shown = s.metrics.map((m) => `${m.label} ${fmt(row[m.key], 1)}`).join(', ');
  // Redis server cost per event (dispatch scenario, Redis variants).
  if (row.redis) {
    const r = row.redis;
    shown += `; redis: scripts ${r.scriptUsPerEvent} µs/ev, ${r.callsPerEvent} cmds/ev, cpu ${r.cpuMsPer1000} µs/ev`;
  }
  if (row.nodeCpuMsPer1000 !== undefined) shown += `; node cpu ${row.nodeCpuMsPer1000} µs/ev`;
  if (row.pgCpuUsPerEvent !== undefined) shown += `; pg cpu ${row.pgCpuUsPerEvent} µs/ev`;
  console.log(`  ${s.id} round ${round} ${label.padEnd(22)} ${shown}   (${secs} s)`);
  return row;
}

function markdown(s: Scenario, rows: Row[]): string {
  const by = (v: string) => rows.filter((r) => r.variant === v);
  const out: string[] = [`### ${s.title}`, ''];
  const metricCols = s.metrics.map((m) => `median ${m.label}`);
  out.push(`| variant | runs | ${metricCols.join(' | ')} | per round |`);
  out.push(`|---|---|${metricCols.map(() => '---:').join('|')}|---|`);
  for (const v of s.variants) {
    const rs = by(v);
    const meds = s.metrics.map((m) => fmt(median(rs.map((r) => r[m.key])), 1));
    const per = rs
      .map((r) => s.metrics.map((m) => fmt(r[m.key], m.key.startsWith('p') ? 1 : 0)).join('/'))
      .join(', ');
    out.push(`| ${v} | ${rs.length} | ${meds.join(' | ')} | ${per} |`);
  }
  out.push('');
  const withTargets = s.pairs.some((p) => p.length === 3);
  out.push(
    `| ours vs baseline | ${s.metrics.map((m) => `ratio ${m.label} (median of per-round ratios)`).join(' | ')} |${withTargets ? ' target (issue 9) |' : ''}`,
  );
  out.push(`|---|${s.metrics.map(() => '---:').join('|')}|${withTargets ? '---|' : ''}`);
  for (const [a, b, target] of s.pairs) {
    if (!s.variants.includes(a) || !s.variants.includes(b)) continue;
    const medians: number[] = [];
    const cells = s.metrics.map((m) => {
      const ratios: number[] = [];
      for (let round = 1; round <= ROUNDS; round++) {
        const ra = rows.find((r) => r.variant === a && r.round === round);
        const rb = rows.find((r) => r.variant === b && r.round === round);
        if (ra && rb) ratios.push(ra[m.key] / rb[m.key]);
      }
      const r = median(ratios);
      medians.push(r);
      const better = m.higherIsBetter ? r >= 1 : r <= 1;
      return `${fmt(r, 2)}× (${better ? 'ours better' : 'ours worse'}; ${ratios.map((x) => x.toFixed(2)).join(', ')})`;
    });
    const goal =
      target === undefined
        ? ''
        : ` ≥ ${target}×: ${medians[0] >= target ? 'met' : Number.isFinite(medians[0]) ? 'not met' : 'n/a'} |`;
    out.push(`| ${a} / ${b} | ${cells.join(' | ')} |${withTargets ? goal || ' |' : ''}`);
  }
  const settings = new Map<string, unknown>();
  for (const r of rows) if (r.settings) settings.set(r.variant, r.settings);
  if (settings.size > 0) {
    out.push('', 'Settings:', '');
    for (const [v, st] of settings) out.push(`- \`${v}\`: \`${JSON.stringify(st)}\``);
  }
  out.push('');
  return out.join('\n');
}

function main(): void {
  const wanted = process.argv.slice(2);
  const chosen = wanted.length ? SCENARIOS.filter((s) => wanted.includes(s.id)) : SCENARIOS;
  const t0 = Date.now();
  const machine = `${cpus().length} × ${cpus()[0]?.model ?? '?'}, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}`;
  const loadBefore = loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
  console.log(`machine: ${machine}; load average before: ${loadBefore}; rounds: ${ROUNDS}`);
  const sections: string[] = [];
  const all: Row[] = [];
  for (const s of chosen) {
    // `append-tx` → BENCH_APPEND_TX_VARIANTS
    const override = process.env[`BENCH_${s.id.toUpperCase().replace(/-/g, '_')}_VARIANTS`];
    if (override) s.variants = override.split(',').map((v) => v.trim());
    console.log(`\n${s.title}`);
    const rows: Row[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      const k = (round - 1) % s.variants.length;
      const order = [...s.variants.slice(k), ...s.variants.slice(0, k)];
      for (const v of order) {
        const row = runVariant(s, v, round);
        if (row) rows.push(row);
      }
    }
    all.push(...rows);
    sections.push(markdown(s, rows));
  }
  const loadAfter = loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
  const total = ((Date.now() - t0) / 1000).toFixed(0);
  const header = [
    `Run at ${new Date().toISOString()} — ${machine}.`,
    `Load average before: ${loadBefore}; after: ${loadAfter}. Rounds: ${ROUNDS}, interleaved. Total ${total} s.`,
    '',
  ].join('\n');
  const report = `${header}\n${sections.join('\n')}`;
  console.log(`\n${report}`);
  const dir = join(__dirname, '..', 'results');
  mkdirSync(dir, { recursive: true });
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  writeFileSync(
    join(dir, `run-${stamp}.jsonl`),
    all.map((r) => JSON.stringify({ machine, ...r })).join('\n') + '\n',
  );
  writeFileSync(join(dir, `run-${stamp}.md`), report);
  writeFileSync(join(dir, 'latest.md'), report);
  console.log(`written: results/run-${stamp}.md and results/latest.md`);
}

main();
