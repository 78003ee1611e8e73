import { describe, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import { DeadLetterSummaryRow } from '../../../lib/interfaces/outbox-store.interface';
import { errorFingerprint } from '../../../lib/stores/store-helpers';
import type { TypeOrmOutboxStore } from '../../../lib/stores/typeorm/internal';
import type {
  Plan,
  SqlDialect,
  StatementResult,
} from '../../../lib/stores/typeorm/dialects/sql-dialect';
import { describeWithService } from '../../support/services';
import { SERVICE_OF, TestDialect, useTables } from './typeorm-test-helpers';

const DEAD = 50_000;
/** Quotes, a backslash and non-ASCII text, which the JSON columns store escaped or not. */
const TRICKY = 'naïve "q" \\ 日本 ';
/** Most rows one statement of the summary may return (its page size). */
const MAX_ROWS_PER_STATEMENT = 1000;

/**
 * Dead letter `n` of the fill below: its type, handler and last error (`null` for an empty
 * history). Messages carry numbers and UUIDs, so they differ per row and group by fingerprint.
 */
function deadLetterOf(n: number): { type: string; handler: string; last: null | [string, string] } {
  const type = `t.${n % 2}`;
  const handler = `H${n % 3}`;
  if (n % 5 === 0) return { type, handler, last: null };
  const name = n % 4 === 1 ? 'TypeError' : 'Error';
  if (n % 7 === 0)
    return {
      type,
      handler,
      last: [name, `lost 0b4c4b8e-7f3a-4b8e-9c1d-2e5f6a7b8c9d at step ${n}`],
    };
  if (n % 11 === 0) return { type, handler, last: [name, `${TRICKY}${n}`] };
  return { type, handler, last: [name, `order ${n} rejected`] };
}

/** The summary of `deadLetterOf(1..count)`, computed here in JavaScript. */
function expectedSummary(count: number): DeadLetterSummaryRow[] {
  const groups = new Map<string, DeadLetterSummaryRow>();
  for (let n = 1; n <= count; n++) {
    const { type, handler, last } = deadLetterOf(n);
    const row = {
      type,
      handler,
      errorName: last?.[0] ?? 'Error',
      fingerprint: errorFingerprint(last?.[1] ?? ''),
      count: 0,
    };
    const k = JSON.stringify([type, handler, row.errorName, row.fingerprint]);
    const group = groups.get(k) ?? row;
    group.count += 1;
    groups.set(k, group);
  }
  return [...groups.values()];
}

const byGroup = (rows: DeadLetterSummaryRow[]) =>
  [...rows].sort((a, b) =>
    JSON.stringify([a.type, a.handler, a.errorName, a.fingerprint]) <
    JSON.stringify([b.type, b.handler, b.errorName, b.fingerprint])
      ? -1
      : 1,
  );

/**
 * Writes dead letters 1..count set-based (through the store it would take an hour), each with
 * an error history of two entries (the last as `deadLetterOf` says) or none.
 */
async function fillDeadLetters(
  ds: DataSource,
  dialect: TestDialect,
  DL: string,
  count: number,
): Promise<void> {
  // One SQL expression per dialect for each part of `deadLetterOf`, over the row number `n`.
  const parts = {
    postgres: {
      from: `generate_series(1, ${count}) n`,
      id: 'gen_random_uuid()',
      uuid: 'gen_random_uuid()::text',
      cat: (...s: string[]) => s.join(' || '),
      entry: (name: string, message: string) =>
        `jsonb_build_object('name', ${name}, 'message', ${message}, 'attempt', 1, 'workerId', 'w', 'at', 0)`,
      list: (...e: string[]) => `jsonb_build_array(${e.join(', ')})`,
      empty: `'[]'::jsonb`,
      now: 'now()',
    },
    mariadb: {
      from: `seq_1_to_${count} s`,
      id: 'UUID()',
      uuid: 'UUID()',
      cat: (...s: string[]) => `CONCAT(${s.join(', ')})`,
      entry: (name: string, message: string) =>
        `JSON_OBJECT('name', ${name}, 'message', ${message}, 'attempt', 1, 'workerId', 'w', 'at', 0)`,
      list: (...e: string[]) => `JSON_ARRAY(${e.join(', ')})`,
      empty: `'[]'`,
      now: 'UTC_TIMESTAMP(3)',
    },
    sqlite: {
      from: `(WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ${count}) SELECT n FROM g)`,
      id: `lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-8' || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6)))`,
      uuid: `lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-8' || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6)))`,
      cat: (...s: string[]) => s.join(' || '),
      entry: (name: string, message: string) =>
        `json_object('name', ${name}, 'message', ${message}, 'attempt', 1, 'workerId', 'w', 'at', 0)`,
      list: (...e: string[]) => `json_array(${e.join(', ')})`,
      empty: `'[]'`,
      now: `${Date.now()}`,
    },
  }[dialect];
  const n = dialect === 'mariadb' ? 's.seq' : 'n';
  // MariaDB reads a backslash in a string literal as an escape.
  const literal = `'${(dialect === 'mariadb' ? TRICKY.replaceAll('\\', '\\\\') : TRICKY).replaceAll("'", "''")}'`;
  const cast = dialect === 'postgres' ? '::text' : '';
  const num = `${n}${cast}`;
  const message = `CASE WHEN ${n} % 7 = 0 THEN ${parts.cat(`'lost '`, parts.uuid, `' at step '`, num)}
    WHEN ${n} % 11 = 0 THEN ${parts.cat(literal, num)}
    ELSE ${parts.cat(`'order '`, num, `' rejected'`)} END`;
  const name = `CASE WHEN ${n} % 4 = 1 THEN 'TypeError' ELSE 'Error' END`;
  const errors = `CASE WHEN ${n} % 5 = 0 THEN ${parts.empty} ELSE ${parts.list(
    parts.entry(`'Old'`, parts.cat(`'first try '`, num)),
    parts.entry(name, message),
  )} END`;
  await ds.query(
    `INSERT INTO ${DL} (id, event_seq, event_type, event_key, handler, attempts, reason, errors, dead_at)
     SELECT ${parts.id}, ${n}, ${parts.cat(`'t.'`, `(${n} % 2)${cast}`)}, NULL,
       ${parts.cat(`'H'`, `(${n} % 3)${cast}`)}, 2, 'exhausted', ${errors}, ${parts.now}
     FROM ${parts.from}`,
  );
}

/**
 * Runs `body` while recording how many rows each statement the store sends returns (every
 * statement goes through its dialect's `run`, on every dialect).
 */
async function rowsPerStatement(store: TypeOrmOutboxStore, body: () => Promise<unknown>) {
  const dialect = (store as unknown as { ctx: { dialect: SqlDialect } }).ctx.dialect;
  const counts: number[] = [];
  const run = dialect.run.bind(dialect);
  function* tap<T>(plan: Plan<T>): Plan<T> {
    let step = plan.next();
    while (!step.done) {
      const result: StatementResult = yield step.value;
      counts.push(result.rows.length);
      step = plan.next(result);
    }
    return step.value;
  }
  dialect.run = ((plan, options) => run(() => tap(plan()), options)) as SqlDialect['run'];
  try {
    await body();
  } finally {
    dialect.run = run;
  }
  return counts;
}

function summaryOn(dialect: TestDialect): void {
  const t = useTables(dialect, 'dls');

  // Used to read every dead letter with its whole error history in one statement and group
  // them in JavaScript: 40,000 dead letters cost 155 MiB of heap, 120,000 crashed a small app.
  it(`summarizes ${DEAD.toLocaleString()} dead letters exactly, no statement returning more than ${MAX_ROWS_PER_STATEMENT} rows`, async () => {
    await fillDeadLetters(t.dataSource, dialect, t.tables.tables.deadLetters.text, DEAD);
    let rows: DeadLetterSummaryRow[] = [];
    const counts = await rowsPerStatement(t.tables.store, async () => {
      rows = await t.tables.store.summarizeDeadLetters({});
    });
    expect(Math.max(...counts)).toBeLessThanOrEqual(MAX_ROWS_PER_STATEMENT);
    expect(byGroup(rows)).toEqual(byGroup(expectedSummary(DEAD)));
    expect(rows.reduce((sum, r) => sum + r.count, 0)).toBe(DEAD);
    // Largest group first.
    expect(rows.map((r) => r.count)).toEqual([...rows.map((r) => r.count)].sort((a, b) => b - a));

    // With a filter: the same count as the JavaScript reference, by the same bounded statements.
    const h1 = expectedSummary(DEAD).filter((r) => r.handler === 'H1' && r.type === 't.0');
    const filtered = await rowsPerStatement(t.tables.store, async () => {
      rows = await t.tables.store.summarizeDeadLetters({ handler: 'H1', type: 't.0' });
    });
    expect(Math.max(...filtered)).toBeLessThanOrEqual(MAX_ROWS_PER_STATEMENT);
    expect(byGroup(rows)).toEqual(byGroup(h1));
  }, 300_000);
}

describe('typeorm dead-letter summary on sqlite', () => summaryOn('sqlite'));
describeWithService(SERVICE_OF.postgres, 'typeorm dead-letter summary on postgres', () =>
  summaryOn('postgres'),
);
describeWithService(SERVICE_OF.mariadb, 'typeorm dead-letter summary on mariadb', () =>
  summaryOn('mariadb'),
);
