import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import type { Pool } from 'mysql2/promise';
import { mysql2Executor } from '../../../lib/executors';
import {
  AppendableEvent,
  HandlerSubscription,
} from '../../../lib/interfaces/outbox-store.interface';
import { SqlOutboxStore } from '../../../lib/stores/typeorm/internal';
import { sql } from '../../../lib/stores/typeorm/sql';
import { describeWithService } from '../../support/services';
import { uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { mysql2StoreFor, openMysqlPool } from './mysql2-test-helpers';

const CLAIMERS = 6;
const EVENTS = 2_000;
const KEYS = 20;
const A: HandlerSubscription = { name: 'A.handle', types: ['race.event'] };

function event(i: number): AppendableEvent {
  return {
    id: randomUUID(),
    type: 'race.event',
    payload: { i },
    // An eighth of the events share keys, so the per-key rule is raced too.
    key: i % 8 === 0 ? `k${i % KEYS}` : null,
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers: i % 10 === 0 ? [] : ['A.handle'],
  };
}

/**
 * MariaDB's one-statement claim through mysql2 (its `SET TRANSACTION` and claim statement sent
 * back to back by `Mysql2Connection.queryBackToBack`): independent claimers, each on its own
 * pool, never share a delivery, lose none, keep each key's order; and a claim leaves its pooled
 * connection at the connection's own isolation level, even when the claim statement fails.
 */
describeWithService('mariadb', 'mysql2Executor claim race', () => {
  const pools: Pool[] = [];
  let tables: Awaited<ReturnType<typeof mysql2StoreFor>>;
  let prefix: string;

  beforeAll(async () => {
    prefix = uniquePrefix('my2r');
    for (let i = 0; i < CLAIMERS; i++) pools.push(openMysqlPool(i === 0 ? 1 : 2));
    tables = await mysql2StoreFor(pools[1], prefix);
  }, 60_000);
  afterAll(async () => {
    await pools[1]?.query(`DROP TABLE IF EXISTS ${prefix}iso`);
    await tables?.drop();
    await Promise.all(pools.map((p) => p.end()));
  });

  it(`${CLAIMERS} claimers on separate pools drain ${EVENTS} events: no double lease, nothing lost, keys in order`, async () => {
    const events = Array.from({ length: EVENTS }, (_, i) => event(i));
    for (let i = 0; i < events.length; i += 500)
      await tables.store.append(events.slice(i, i + 500));

    const held = new Set<string>();
    const handled = new Map<string, number>();
    const orderByKey = new Map<string, number[]>();
    let doubleLeases = 0;
    let lostAcks = 0;
    const deadline = Date.now() + 25_000;

    const claimer = async (w: number) => {
      const store = new SqlOutboxStore(mysql2Executor(pools[w]), { tablePrefix: prefix });
      let idle = 0;
      while (handled.size < EVENTS && Date.now() < deadline && idle < 50) {
        const batch = await store.claim({
          workerId: `w${w}`,
          handlers: [A],
          limit: 50,
          leaseMs: 60_000,
        });
        if (batch.length === 0) {
          idle++;
          await new Promise((resolve) => setTimeout(resolve, 5));
          continue;
        }
        idle = 0;
        for (const c of batch) {
          if (held.has(c.id)) doubleLeases++;
          held.add(c.id);
        }
        await new Promise((resolve) => setImmediate(resolve));
        for (const c of batch) {
          if (c.event.key !== null) {
            const seen = orderByKey.get(c.event.key) ?? [];
            seen.push((c.event.payload as { i: number }).i);
            orderByKey.set(c.event.key, seen);
          }
          handled.set(c.event.id, (handled.get(c.event.id) ?? 0) + 1);
        }
        await Promise.all(
          batch.map(async (c) => {
            held.delete(c.id);
            await store.ack(c.lease).catch(() => lostAcks++);
          }),
        );
      }
    };
    await Promise.all(Array.from({ length: CLAIMERS }, (_, w) => claimer(w)));

    expect(doubleLeases).toBe(0);
    expect(lostAcks).toBe(0);
    expect(handled.size).toBe(EVENTS);
    expect([...handled.values()].every((n) => n === 1)).toBe(true);
    for (const seen of orderByKey.values()) expect(seen).toEqual([...seen].sort((a, b) => a - b));
    expect(await tables.store.stats()).toMatchObject({ pending: 0, leased: 0 });
  }, 60_000);

  it('leaves the pooled connection at its own isolation level, also when the claim statement fails', async () => {
    // pools[0] has one connection: whatever a claim leaves on it, the next user gets.
    const store = new SqlOutboxStore(mysql2Executor(pools[0]), { tablePrefix: prefix });
    // How the next transaction on that connection reads: whether it sees a row another
    // connection commits after its first read (READ COMMITTED) or not (REPEATABLE READ).
    const scratch = `${prefix}iso`;
    await pools[1].query(`CREATE TABLE IF NOT EXISTS ${scratch} (id VARCHAR(36) PRIMARY KEY)`);
    const isolation = async () => {
      const conn = await pools[0].getConnection();
      const count = async () => {
        const [rows] = await conn.query(`SELECT COUNT(*) AS n FROM ${scratch}`);
        return Number((rows as Array<{ n: number }>)[0].n);
      };
      try {
        await conn.query('START TRANSACTION');
        const first = await count();
        await pools[1].query(`INSERT INTO ${scratch} (id) VALUES (?)`, [randomUUID()]);
        const second = await count();
        await conn.query('ROLLBACK');
        return second === first ? 'REPEATABLE READ' : 'READ COMMITTED';
      } finally {
        conn.release();
      }
    };
    await tables.empty();
    await store.append([event(1), event(3)]);
    expect(await isolation()).toBe('REPEATABLE READ');
    expect(
      await store.claim({ workerId: 'w', handlers: [A], limit: 10, leaseMs: 60_000 }),
    ).toHaveLength(2);
    expect(await isolation()).toBe('REPEATABLE READ');

    await store.append([event(5)]);
    const dialect = (store as unknown as { ctx: { dialect: Record<string, unknown> } }).ctx.dialect;
    const original = dialect.claimStatement;
    dialect.claimStatement = () => sql`SELEC no_such_statement`;
    try {
      await expect(
        store.claim({ workerId: 'w', handlers: [A], limit: 10, leaseMs: 60_000 }),
      ).rejects.toMatchObject({ errno: 1064 });
    } finally {
      dialect.claimStatement = original;
    }
    expect(await isolation()).toBe('REPEATABLE READ');
    expect(
      await store.claim({ workerId: 'w', handlers: [A], limit: 10, leaseMs: 60_000 }),
    ).toHaveLength(1);
  });
});
