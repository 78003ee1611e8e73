/*
 * Idempotent append (docs/guarantees.md, Guarantees 10) from a caller transaction whose snapshot
 * predates another transaction's commit of the same id: MariaDB's default REPEATABLE READ keeps
 * the snapshot of the transaction's first read, so a plain read cannot see that event. The append
 * must still be a no-op for identical content and a DuplicateEventError for different content,
 * never the driver's duplicate-key error, with the caller's transaction usable and holding
 * nothing of a refused batch.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { DataSource, QueryRunner } from 'typeorm';
import { DuplicateEventError } from '../../../lib/errors/duplicate-event.error';
import { AppendableEvent } from '../../../lib/interfaces/outbox-store.interface';
import { describeWithService } from '../../support/services';
import { openDataSource, storeFor, uniquePrefix } from './typeorm-test-helpers';
import type { Pool } from 'mysql2/promise';
import { mysql2StoreFor, openMysqlPool } from '../sql/mysql2-test-helpers';

function event(over: Partial<AppendableEvent> = {}): AppendableEvent {
  return {
    id: randomUUID(),
    type: 'snap.event',
    payload: { v: 1 },
    key: 'k1',
    headers: {},
    occurredAt: new Date('2026-01-01T00:00:00.000Z'),
    availableAt: null,
    handlers: ['A.handle'],
    ...over,
  };
}

describeWithService('mariadb', 'append from a REPEATABLE READ snapshot older than the id', () => {
  let ds: DataSource;
  let h: Awaited<ReturnType<typeof storeFor>>;
  beforeAll(async () => {
    ds = await openDataSource('mariadb');
    h = await storeFor(ds, uniquePrefix('snap'));
  });
  afterAll(async () => {
    await h?.drop();
    await ds?.destroy();
  });

  const count = async (table: 'events' | 'deliveries', ids: string[]) => {
    const column = table === 'events' ? 'id' : 'event_seq';
    const where =
      table === 'events'
        ? `id IN (${ids.map(() => '?').join(', ')})`
        : `${column} IN (SELECT seq FROM ${h.tables.events.text} WHERE id IN (${ids.map(() => '?').join(', ')}))`;
    const [row] = await ds.query(
      `SELECT COUNT(*) AS n FROM ${h.tables[table].text} WHERE ${where}`,
      ids,
    );
    return Number(row.n);
  };

  /** Runs `body` in a REPEATABLE READ transaction whose snapshot is taken before `committed`. */
  async function afterSnapshot<T>(
    committed: AppendableEvent[],
    body: (runner: QueryRunner) => Promise<T>,
  ): Promise<T> {
    const runner = ds.createQueryRunner();
    try {
      await runner.startTransaction('REPEATABLE READ');
      await runner.query(`SELECT COUNT(*) FROM ${h.tables.events.text}`);
      await h.store.append(committed);
      const result = await body(runner);
      await runner.commitTransaction();
      return result;
    } finally {
      if (runner.isTransactionActive) await runner.rollbackTransaction();
      await runner.release();
    }
  }

  it('identical content is a no-op that returns the stored event', async () => {
    const e = event();
    const stored = await afterSnapshot([e], (r) => h.store.append([e], { manager: r.manager }));
    expect(stored).toEqual([expect.objectContaining({ id: e.id, payload: { v: 1 } })]);
    expect(await count('events', [e.id])).toBe(1);
    expect(await count('deliveries', [e.id])).toBe(1);
  });

  it('different content is refused with DuplicateEventError, the transaction usable', async () => {
    const e = event();
    const fresh = event();
    await afterSnapshot([e], async (r) => {
      await expect(
        h.store.append([fresh, { ...e, payload: { v: 2 } }], { manager: r.manager }),
      ).rejects.toBeInstanceOf(DuplicateEventError);
      await r.query('SELECT 1');
    });
    expect(await count('events', [e.id, fresh.id])).toBe(1);
  });

  it('a batch mixing that id with new ones writes the new ones once', async () => {
    const e = event();
    const news = [event(), event({ key: null })];
    const stored = await afterSnapshot([e], (r) =>
      h.store.append([news[0], e, news[1]], { manager: r.manager }),
    );
    expect(stored.map((s) => s.id)).toEqual([news[0].id, e.id, news[1].id]);
    expect(await count('events', [e.id, ...news.map((n) => n.id)])).toBe(3);
    expect(await count('deliveries', [e.id, ...news.map((n) => n.id)])).toBe(3);
  });
});

describeWithService('mariadb', 'append from an older snapshot through the mysql2 executor', () => {
  let pool: Pool;
  let h: Awaited<ReturnType<typeof mysql2StoreFor>>;
  beforeAll(async () => {
    pool = openMysqlPool(4);
    h = await mysql2StoreFor(pool, uniquePrefix('snapm'));
  });
  afterAll(async () => {
    await h?.drop();
    await pool?.end();
  });

  it.each([
    ['identical content is a no-op', (e: AppendableEvent) => e, 'no-op'],
    [
      'different content is a DuplicateEventError',
      (e: AppendableEvent) => ({ ...e, payload: { v: 2 } }),
      'duplicate',
    ],
  ] as const)('%s', async (_label, change, expected) => {
    const e = event();
    const conn = await pool.getConnection();
    try {
      await conn.query('START TRANSACTION');
      await conn.query(`SELECT COUNT(*) FROM ${h.tables.events.text}`);
      await h.store.append([e]);
      const outcome = await h.store.append([change(e)], { tx: conn }).then(
        () => 'no-op',
        (error: Error) =>
          error instanceof DuplicateEventError ? 'duplicate' : `${error.name}: ${error.message}`,
      );
      expect(outcome).toBe(expected);
      await conn.query('COMMIT');
    } finally {
      await conn.query('ROLLBACK').catch(() => undefined);
      conn.release();
    }
    const [rows] = await pool.query(
      `SELECT COUNT(*) AS n FROM ${h.tables.events.text} WHERE id = ?`,
      [e.id],
    );
    expect(Number((rows as Array<{ n: number }>)[0].n)).toBe(1);
  });
});
