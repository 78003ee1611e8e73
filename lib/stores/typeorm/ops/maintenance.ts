import {
  CleanupOptions,
  CleanupResult,
  OutboxStoreStats,
} from '../../../interfaces/outbox-store.interface';
import { Plan, Row } from '../dialects/sql-dialect';
import { EMPTY, raw, sql, SqlText } from '../sql';
import { ID_BATCH, isTruthy, StoreContext } from './context';

/**
 * Deletes the events among `seqs` that no delivery or dead letter refers to any more. The
 * condition is checked by the deleting statement itself, so an event whose dead letter was
 * replayed a moment ago (its delivery is open again) stays.
 */
export function* deleteOrphans(
  ctx: StoreContext,
  seqs: number[],
  olderThan?: SqlText,
): Plan<number> {
  const { D, DL, E } = ctx;
  const unique = [...new Set(seqs)];
  let deleted = 0;
  for (let i = 0; i < unique.length; i += ID_BATCH) {
    const some = ctx.dialect.anyOf(raw('seq'), unique.slice(i, i + ID_BATCH), 'bigint');
    const age = olderThan ? sql` AND available_at < ${olderThan}` : EMPTY;
    const { affected } =
      yield sql`DELETE FROM ${E} WHERE ${some} AND NOT EXISTS (SELECT 1 FROM ${D} x WHERE x.event_seq = ${E}.seq) AND NOT EXISTS (SELECT 1 FROM ${DL} y WHERE y.event_seq = ${E}.seq)${age}`;
    deleted += affected;
  }
  return deleted;
}

/** The database clock, counts for the stats endpoint and metrics, and retention. */
export class MaintenanceOps {
  constructor(private readonly ctx: StoreContext) {}

  async now(): Promise<Date> {
    const d = this.ctx.dialect;
    const { rows } = await this.ctx.one(sql`SELECT ${d.timeOut(d.now)} AS now`);
    return d.readTime(rows[0]?.now);
  }

  async stats(): Promise<OutboxStoreStats> {
    const d = this.ctx.dialect;
    const due = sql`d.status = 'pending' AND d.available_at <= ${d.now}`;
    const { D, DL } = this.ctx;
    const [nowRows, rows, dead] = await d.run(function* (): Plan<[Row[], Row[], Row[]]> {
      const now = yield sql`SELECT ${d.timeOut(d.now)} AS now`;
      const groups =
        yield sql`SELECT d.event_type, d.status, COUNT(*) AS n, SUM(CASE WHEN ${due} THEN 1 ELSE 0 END) AS due, ${d.timeOut(sql`MIN(CASE WHEN ${due} THEN d.available_at END)`)} AS oldest FROM ${D} d GROUP BY d.event_type, d.status`;
      const deadGroups = yield sql`SELECT event_type, COUNT(*) AS n FROM ${DL} GROUP BY event_type`;
      return [now.rows, groups.rows, deadGroups.rows];
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
    const of = (type: unknown) =>
      (stats.byType[String(type)] ??= { pending: 0, leased: 0, dead: 0 });
    for (const r of dead) {
      const n = Number(r.n);
      of(r.event_type).dead += n;
      stats.dead += n;
    }
    for (const r of rows) {
      const n = Number(r.n);
      const status = String(r.status) as 'pending' | 'leased';
      if (status !== 'pending' && status !== 'leased') continue;
      of(r.event_type)[status] += n;
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

  /**
   * One bounded batch of each kind in one short transaction (the dispatcher's cleanup job calls
   * again while batches come back full). Reads go through indexes on the retention clocks
   * (`dead_at`, `available_at`): a run costs what it deletes, not the history it keeps.
   */
  async cleanup(options: CleanupOptions): Promise<CleanupResult> {
    const size = Math.max(1, Math.floor(options.batchSize));
    return (await this.cleanupBatch(options, size)) ?? { events: 0, deadLetters: 0 };
  }

  /** One batch; `null` when another runner holds the cleanup lock. */
  private cleanupBatch(options: CleanupOptions, size: number): Promise<CleanupResult | null> {
    const { ctx } = this;
    const d = ctx.dialect;
    const { D, DL, E } = ctx;
    const lockName = `${d.tables.lockName}:cleanup`;
    const batch = raw(String(size));
    return d.run(
      function* (): Plan<CleanupResult | null> {
        // One runner at a time: others skip this round instead of queueing on the same rows.
        const { rows: locked } = yield d.tryLock(lockName);
        if (!isTruthy(locked[0]?.ok)) return null;
        const unlock = d.unlock(lockName);
        try {
          const result: CleanupResult = { events: 0, deadLetters: 0 };
          if (options.deadLetterRetentionMs !== null) {
            const cutoff = d.plusMs(d.now, -options.deadLetterRetentionMs);
            const { rows } =
              yield sql`SELECT id, event_seq FROM ${DL} WHERE dead_at < ${cutoff} ORDER BY dead_at LIMIT ${batch}`;
            if (rows.length > 0) {
              // The age is checked again by the delete: a row replayed meanwhile is gone from
              // here, and one purged meanwhile is not counted twice.
              const { affected } = yield sql`DELETE FROM ${DL} WHERE ${d.anyOf(
                raw('id'),
                rows.map((r) => r.id),
                'uuid',
              )} AND dead_at < ${cutoff}`;
              yield* deleteOrphans(
                ctx,
                rows.map((r) => Number(r.event_seq)),
              );
              result.deadLetters = affected;
            }
          }
          const cutoff = d.plusMs(d.now, -options.deliveredRetentionMs);
          const { rows } =
            yield sql`SELECT e.seq FROM ${E} e WHERE e.available_at < ${cutoff} AND NOT EXISTS (SELECT 1 FROM ${D} x WHERE x.event_seq = e.seq) AND NOT EXISTS (SELECT 1 FROM ${DL} y WHERE y.event_seq = e.seq) ORDER BY e.available_at LIMIT ${batch}`;
          if (rows.length > 0) {
            result.events = yield* deleteOrphans(
              ctx,
              rows.map((r) => Number(r.seq)),
              cutoff,
            );
          }
          return result;
        } finally {
          if (unlock) yield unlock;
        }
      },
      { transaction: true, deadlockRetries: 3 },
    );
  }
}
