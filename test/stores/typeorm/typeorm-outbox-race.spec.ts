import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import {
  AppendableEvent,
  HandlerSubscription,
} from '../../../lib/interfaces/outbox-store.interface';
import { TypeOrmOutboxStore } from '../../../lib/stores/typeorm/internal';
import { describeWithService } from '../../support/services';
import {
  claimInTransaction,
  openDataSource,
  SERVICE_OF,
  storeFor,
  TestDialect,
  uniquePrefix,
} from './typeorm-test-helpers';

const CLAIMERS = 8;
const EVENTS = 5_000;
const KEYS = 20;
const A: HandlerSubscription = { name: 'A.handle', types: ['race.event'] };

/**
 * The race itself: independent claimers, each with its own DataSource (own pool), draining one
 * backlog. A delivery may never be held by two claimers at once, every one must be handled exactly
 * once, and each key's events must reach the handler in append order.
 */
function raceOn(dialect: TestDialect, transactionClaim = false): void {
  const sources: DataSource[] = [];
  let tables: Awaited<ReturnType<typeof storeFor>>;
  let prefix: string;

  beforeAll(async () => {
    prefix = uniquePrefix(`r${dialect.slice(0, 2)}`);
    for (let i = 0; i < CLAIMERS; i++)
      sources.push(
        await openDataSource(dialect, dialect === 'postgres' ? { max: 2 } : { connectionLimit: 2 }),
      );
    tables = await storeFor(sources[0], prefix);
  }, 60_000);
  afterAll(async () => {
    await tables?.drop();
    await Promise.all(sources.map((s) => s.destroy()));
  });

  it(`${CLAIMERS} claimers on separate connections drain ${EVENTS} events: no double lease, nothing lost, keys in order`, async () => {
    const events: AppendableEvent[] = Array.from({ length: EVENTS }, (_, i) => ({
      id: randomUUID(),
      type: 'race.event',
      payload: { i },
      // An eighth of the events share keys, so the per-key rule is raced too.
      key: i % 8 === 0 ? `k${i % KEYS}` : null,
      headers: {},
      occurredAt: new Date(),
      availableAt: null,
      handlers: i % 10 === 0 ? [] : ['A.handle'],
    }));
    for (let i = 0; i < events.length; i += 500)
      await tables.store.append(events.slice(i, i + 500));

    const held = new Set<string>();
    const handled = new Map<string, number>();
    const orderByKey = new Map<string, number[]>();
    let doubleLeases = 0;
    let lostAcks = 0;
    // MariaDB drains in ~16 s on an idle two-core machine; the rest is room for a loaded one.
    const deadline = Date.now() + 45_000;

    const claimer = async (w: number) => {
      const store = new TypeOrmOutboxStore(sources[w], { tablePrefix: prefix });
      if (transactionClaim) claimInTransaction(store);
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
        // Let other claimers run while these leases are held.
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
            // Handled means released: clear the mark before the ack makes the delivery claimable.
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
  }, 75_000);

  it('runs concurrent cleanups one at a time, each row deleted once', async () => {
    const stores = sources.map((s) => new TypeOrmOutboxStore(s, { tablePrefix: prefix }));
    await new Promise((resolve) => setTimeout(resolve, 20));
    const results = await Promise.all(
      stores.map((store) =>
        store.cleanup({ deliveredRetentionMs: 0, deadLetterRetentionMs: null, batchSize: 2_000 }),
      ),
    );
    const deleted = results.reduce((sum, r) => sum + r.events, 0);
    const rest = await stores[0].cleanup({
      deliveredRetentionMs: 0,
      deadLetterRetentionMs: null,
      batchSize: 10_000,
    });
    expect(deleted + rest.events).toBe(EVENTS);
    expect(results.filter((r) => r.events > 0).length).toBeGreaterThanOrEqual(1);
  }, 30_000);
}

describeWithService(SERVICE_OF.postgres, 'typeorm claim race', () => raceOn('postgres'));
describeWithService(SERVICE_OF.mariadb, 'typeorm claim race', () => raceOn('mariadb'));
// The MySQL 8 claim (no RETURNING), run on MariaDB.
describeWithService(SERVICE_OF.mariadb, 'typeorm claim race, transaction claim', () =>
  raceOn('mariadb', true),
);
