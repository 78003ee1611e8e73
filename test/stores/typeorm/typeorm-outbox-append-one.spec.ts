/*
 * The usual append — one event in the caller's transaction — skips the plan runner and sends the
 * dialect's one statement straight to the caller's connection (PostgreSQL; run 28 in
 * bench/RESULTS.md). These check that it keeps what the plan guaranteed: one statement, in the
 * caller's transaction, prepared or not; an existing id with the same content is a no-op that
 * returns the stored event, with different content it is refused and nothing is written; the
 * same event from two transactions is one.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, expect, it, jest } from '@jest/globals';
import { DataSource, QueryRunner } from 'typeorm';
import { DuplicateEventError } from '../../../lib/errors/duplicate-event.error';
import { AppendableEvent } from '../../../lib/interfaces/outbox-store.interface';
import { TypeOrmOutboxStore } from '../../../lib/stores/typeorm/typeorm-outbox.store';
import { describeWithService } from '../../support/services';
import { openDataSource, SERVICE_OF, storeFor, uniquePrefix } from './typeorm-test-helpers';

function event(over: Partial<AppendableEvent> = {}): AppendableEvent {
  return {
    id: randomUUID(),
    type: 'one.event',
    payload: { v: 1 },
    key: 'k1',
    headers: { h: 'x' },
    occurredAt: new Date('2026-01-01T00:00:00.000Z'),
    availableAt: null,
    handlers: ['A.handle'],
    ...over,
  };
}

/** Statements sent on the `pg` clients (prepared ones included, which TypeORM does not log). */
function countPgQueries(ds: DataSource): { texts: string[]; stop: () => void } {
  const Client = (ds.driver as unknown as { postgres: { Client: { prototype: { query: any } } } })
    .postgres.Client;
  const query = Client.prototype.query;
  const texts: string[] = [];
  Client.prototype.query = function (this: unknown, ...args: any[]) {
    texts.push(typeof args[0] === 'string' ? args[0] : String(args[0]?.text));
    return query.apply(this, args);
  };
  return { texts, stop: () => (Client.prototype.query = query) };
}

for (const prepared of [true, false]) {
  describeWithService(
    SERVICE_OF.postgres,
    `typeorm append of one event in the caller's transaction (prepared statements ${prepared ? 'on' : 'off'})`,
    () => {
      let ds: DataSource;
      let h: Awaited<ReturnType<typeof storeFor>>;
      let store: TypeOrmOutboxStore;

      beforeAll(async () => {
        ds = await openDataSource('postgres');
        h = await storeFor(ds, uniquePrefix(`one${prepared ? 'p' : 'u'}`));
        store = new TypeOrmOutboxStore(ds, {
          tablePrefix: h.tables.prefix,
          preparedStatements: prepared,
        });
      });
      afterAll(async () => {
        await h?.drop();
        await ds?.destroy();
      });
      beforeEach(() => h.empty());

      async function inTransaction<T>(work: (runner: QueryRunner) => Promise<T>): Promise<T> {
        const runner = ds.createQueryRunner();
        await runner.startTransaction();
        try {
          const result = await work(runner);
          await runner.commitTransaction();
          return result;
        } finally {
          if (runner.isTransactionActive) await runner.rollbackTransaction();
          await runner.release();
        }
      }

      const count = async (table: 'events' | 'deliveries') =>
        (await ds.query(`SELECT COUNT(*)::int AS n FROM ${h.tables[table].text}`))[0].n;

      it('writes the event and its delivery in one statement on the caller connection, and returns what was stored', async () => {
        const e = event();
        const dialect = (store as unknown as { ctx: { dialect: { appendOneOn: () => unknown } } })
          .ctx.dialect;
        const direct = jest.spyOn(dialect, 'appendOneOn');
        const watch = countPgQueries(ds);
        let stored;
        let directCalls = 0;
        try {
          stored = await inTransaction(async (runner) => {
            watch.texts.length = 0;
            const result = await store.append([e], { manager: runner.manager });
            expect(watch.texts).toHaveLength(1);
            expect(watch.texts[0]).toMatch(/INSERT INTO/);
            return result;
          });
        } finally {
          watch.stop();
          directCalls = direct.mock.calls.length;
          direct.mockRestore();
        }
        // Through the direct path, not the plan runner.
        expect(directCalls).toBe(1);
        expect(stored).toEqual([
          {
            id: e.id,
            type: e.type,
            payload: { v: 1 },
            key: 'k1',
            headers: { h: 'x' },
            occurredAt: e.occurredAt,
            availableAt: expect.any(Date),
          },
        ]);
        expect(stored[0].headers).not.toBe(e.headers);
        expect(await count('events')).toBe(1);
        expect(await count('deliveries')).toBe(1);
        // Scheduled: the due time given, not the database clock.
        const later = new Date('2030-05-06T07:08:09.123Z');
        const [s] = await inTransaction((r) =>
          store.append([event({ availableAt: later })], { manager: r.manager }),
        );
        expect(s.availableAt).toEqual(later);
      });

      it('rolls back with the caller transaction', async () => {
        const runner = ds.createQueryRunner();
        await runner.startTransaction();
        await store.append([event()], { manager: runner.manager });
        await runner.rollbackTransaction();
        await runner.release();
        expect(await count('events')).toBe(0);
        expect(await count('deliveries')).toBe(0);
      });

      it('an existing id with the same content is a no-op returning the stored event', async () => {
        const e = event();
        await inTransaction((r) => store.append([e], { manager: r.manager }));
        const again = await inTransaction((r) =>
          store.append([{ ...e, handlers: ['A.handle'] }], { manager: r.manager }),
        );
        expect(again[0]).toMatchObject({ id: e.id, payload: { v: 1 }, key: 'k1' });
        expect(await count('events')).toBe(1);
        expect(await count('deliveries')).toBe(1);
      });

      it('an existing id with other content is refused, the caller transaction usable and holding nothing of it', async () => {
        const e = event();
        await inTransaction((r) => store.append([e], { manager: r.manager }));
        await inTransaction(async (runner) => {
          await expect(
            store.append([{ ...e, payload: { v: 2 } }], { manager: runner.manager }),
          ).rejects.toBeInstanceOf(DuplicateEventError);
          const [row] = await runner.query(
            `SELECT COUNT(*)::int AS n FROM ${h.tables.events.text}`,
          );
          expect(row.n).toBe(1);
        });
        expect(await count('deliveries')).toBe(1);
      });

      it('the same event from two concurrent transactions is stored once', async () => {
        const e = event();
        const first = ds.createQueryRunner();
        const second = ds.createQueryRunner();
        try {
          await first.startTransaction();
          await second.startTransaction();
          await store.append([e], { manager: first.manager });
          // Waits on the first transaction's uncommitted row, then finds it committed.
          const pending = store.append([e], { manager: second.manager });
          await first.commitTransaction();
          await expect(pending).resolves.toEqual([expect.objectContaining({ id: e.id })]);
          await second.commitTransaction();
        } finally {
          for (const r of [first, second]) {
            if (r.isTransactionActive) await r.rollbackTransaction();
            await r.release();
          }
        }
        expect(await count('events')).toBe(1);
        expect(await count('deliveries')).toBe(1);
      });
    },
  );
}
