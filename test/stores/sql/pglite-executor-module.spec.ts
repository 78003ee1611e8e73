import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { PGlite, Transaction } from '@electric-sql/pglite';
import { Inject, INestApplication, Injectable, Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import {
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxOptionsError,
  OutboxService,
  OutboxValidationError,
  pgliteExecutor,
} from 'nestjs-outbox';
import { openDataSource } from '../typeorm/typeorm-test-helpers';
import { openPglite, PGLITE_START_MS } from './pglite-test-helpers';

/**
 * docs/testing.md "Testing your app without a database server (PGlite)": the app's tests run the 'sql'
 * store on PGlite in this process, `append(events, { tx })` with PGlite's `tx`. The event exists
 * iff that transaction commits, and is delivered once, woken when the transaction ends (the poll
 * is a minute here).
 */

const PGLITE = Symbol('PGLITE');

@Injectable()
class Orders {
  constructor(
    @Inject(PGLITE) private readonly pg: PGlite,
    private readonly outbox: OutboxService,
  ) {}

  place(orderId: string, fail = false): Promise<void> {
    return this.pg.transaction(async (tx) => {
      await tx.query('INSERT INTO orders (id) VALUES ($1)', [orderId]);
      await this.outbox.append(
        { type: 'order.placed', key: orderId, payload: { orderId } },
        { tx },
      );
      if (fail) throw new Error('payment declined');
    });
  }
}

@Injectable()
class Delivered {
  readonly ids: string[] = [];
  @OutboxHandler('order.placed')
  handle(event: OutboxEvent<{ orderId: string }>): void {
    this.ids.push(event.payload.orderId);
  }
}

async function until(check: () => boolean, ms = 5_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (!check() && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  return check();
}

describe('sql store through pgliteExecutor, in an app', () => {
  let pg: PGlite;
  let app: INestApplication;
  let outbox: OutboxService;

  beforeAll(async () => {
    pg = await openPglite();
    await pg.exec('CREATE TABLE orders (id text PRIMARY KEY)');
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: { type: 'sql', executor: pgliteExecutor(pg), ensureSchema: true },
          dispatcher: { pollInterval: 60_000 },
          retention: { cleanupIntervalMs: 0 },
        }),
      ],
      providers: [{ provide: PGLITE, useValue: pg }, Orders, Delivered],
    })
    class PgliteApp {}
    const moduleRef = await Test.createTestingModule({ imports: [PgliteApp] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    outbox = app.get(OutboxService);
  }, PGLITE_START_MS);

  afterAll(async () => {
    await app?.close();
    await pg?.close();
  });

  const delivered = () => app.get(Delivered).ids;
  const count = async (table: string, column: string, id: string) =>
    (
      await pg.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${table} WHERE ${column} = $1`,
        [id],
      )
    ).rows[0].n;
  const refusal = (tx: unknown, id: string) =>
    outbox.append({ type: 'order.placed', key: id, payload: { orderId: id } }, { tx }).then(
      () => undefined,
      (e: unknown) => e as OutboxValidationError,
    );

  it('a rolled-back transaction (a throw or tx.rollback()): neither the order nor the event exists', async () => {
    await expect(app.get(Orders).place('declined', true)).rejects.toThrow('payment declined');
    await pg.transaction(async (tx) => {
      await outbox.append(
        { type: 'order.placed', key: 'rollback', payload: { orderId: 'rollback' } },
        { tx },
      );
      await tx.rollback();
    });
    await app.get(OutboxDispatcher).drain();
    for (const id of ['declined', 'rollback']) {
      expect(await count('orders', 'id', id)).toBe(0);
      expect(await count('outbox_events', 'event_key', id)).toBe(0);
      expect(delivered()).not.toContain(id);
    }
  });

  it('a committed transaction: the event is delivered once, woken when it ends (no poll)', async () => {
    await app.get(Orders).place('committed');
    expect(await until(() => delivered().includes('committed'))).toBe(true);
    await app.get(OutboxDispatcher).drain();
    expect(delivered().filter((id) => id === 'committed')).toHaveLength(1);
    expect(await count('outbox_events', 'event_key', 'committed')).toBe(1);
  });

  it('refuses the database itself, an ended or failed transaction, and a TypeORM EntityManager', async () => {
    expect((await refusal(pg, 'db'))?.message).toMatch(
      /options\.tx.*PGlite database, not a transaction/s,
    );
    expect((await refusal({}, 'plain'))?.message).toMatch(
      /not a PGlite transaction, got a plain object/,
    );
    let ended: Transaction | undefined;
    await pg.transaction(async (tx) => {
      ended = tx;
    });
    expect((await refusal(ended, 'ended'))?.message).toMatch(/not inside an open transaction/);
    let failed: OutboxValidationError | undefined;
    // PGlite rolls a failed transaction back and rejects with its own error.
    await pg
      .transaction(async (tx) => {
        await tx.query('SELECT 1/0').catch(() => undefined);
        failed = await refusal(tx, 'failed');
      })
      .catch(() => undefined);
    expect(failed).toBeInstanceOf(OutboxValidationError);
    expect((failed as Error).message).toMatch(/options\.tx.*failed transaction/s);
    const ds = await openDataSource('sqlite');
    try {
      const asManager = await ds.transaction((manager) => refusal(manager, 'orm'));
      expect(asManager?.message).toMatch(/TypeORM EntityManager.*PGlite/s);
    } finally {
      await ds.destroy();
    }
    for (const id of ['db', 'plain', 'ended', 'failed', 'orm']) {
      expect(await count('outbox_events', 'event_key', id)).toBe(0);
    }
  });

  it('without tx, commits the event in its own transaction', async () => {
    await outbox.append({ type: 'order.placed', key: 'own', payload: { orderId: 'own' } });
    expect(await until(() => delivered().includes('own'))).toBe(true);
  });

  it('pgliteExecutor(pg) refuses what is not a PGlite database', async () => {
    expect(() => pgliteExecutor({})).toThrow(OutboxOptionsError);
    expect(() => pgliteExecutor({})).toThrow(/store\.executor.*PGlite instance.*plain object/s);
    await pg.transaction(async (tx) => {
      expect(() => pgliteExecutor(tx)).toThrow(/PGlite transaction \(tx\): pass the database/);
    });
    expect(pgliteExecutor(pg)).toMatchObject({ client: 'PGlite', txOption: 'tx' });
  });
});
