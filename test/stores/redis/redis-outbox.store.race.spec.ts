import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import {
  AppendableEvent,
  ClaimedDelivery,
  HandlerSubscription,
  LeaseLostError,
} from 'nestjs-outbox';
import { RedisOutboxStore } from '../../../lib/stores/redis';
import { describeWithService } from '../../support/services';
import { connect, dropPrefix, keysOf, uniquePrefix } from './redis-test-support';

const CLAIMERS = 8;
const EVENTS = 5_000;
// Long enough that a settle on a loaded 2-core CI box never outlives its own lease.
const LEASE_MS = 5_000;
const HANDLERS: HandlerSubscription[] = [
  { name: 'H1', types: ['race.event'] },
  { name: 'H2', types: ['race.event'] },
];

describeWithService('redis', 'RedisOutboxStore under concurrent claimers', () => {
  const clients: Redis[] = [];
  let admin: Redis;
  let prefix: string;

  beforeAll(() => {
    admin = connect();
    prefix = uniquePrefix('race');
  });
  afterAll(async () => {
    await dropPrefix(admin, prefix);
    await Promise.all([admin, ...clients].map((c) => c.quit()));
  });

  it(`${CLAIMERS} claimers on their own connections over ${EVENTS} events: no double lease, nothing lost, order kept, memory returns to baseline`, async () => {
    const store = (client: Redis) => new RedisOutboxStore({ client, prefix });
    const appenderClient = connect();
    clients.push(appenderClient);
    const appender = store(appenderClient);

    // Baseline: the only key an emptied outbox keeps is its append counter.
    const [warm] = await appender.append([event(-1, null, ['H1'])]);
    const [w] = await appender.claim({
      workerId: 'warm',
      handlers: HANDLERS,
      limit: 1,
      leaseMs: LEASE_MS,
    });
    expect(w.event.id).toBe(warm.id);
    await appender.ack(w.lease);
    // Retention 0 removes what was delivered strictly before now: let the store clock move on.
    await new Promise((r) => setTimeout(r, 5));
    await appender.cleanup({ deliveredRetentionMs: 0, deadLetterRetentionMs: 0, batchSize: 10 });
    const baseline = await keysOf(admin, prefix);
    expect(baseline).toEqual([`{${prefix}}:seq`]);

    const events = Array.from({ length: EVENTS }, (_, i) =>
      // Every 5th event is keyed (10 keys); every 10th is appended without known handlers.
      event(i, i % 5 === 0 ? `key-${i % 50}` : null, i % 10 === 3 ? [] : ['H1', 'H2']),
    );
    const expected = EVENTS * HANDLERS.length;

    // Held leases by delivery id: who holds it and until when (store clock).
    const held = new Map<string, { worker: string; until: number }>();
    const acked = new Map<string, number>();
    // Claim times (store clock) per (handler, key) and event index. Reply order in JS is not store
    // order across connections, so per-key order is checked on these.
    const claimTimes = new Map<string, Map<number, { first: number; last: number }>>();
    let doubleLeases = 0;
    let orderViolations = 0;
    let lost = 0;
    let appended = 0;

    const appending = (async () => {
      for (let i = 0; i < events.length; i += 100) {
        await appender.append(events.slice(i, i + 100));
        appended = i + 100;
      }
    })();

    const worker = async (n: number) => {
      const client = connect();
      clients.push(client);
      const s = store(client);
      const workerId = `w${n}`;
      // Give up only after everything was appended and nothing came back for well over a lease
      // (crashed deliveries return when their lease expires); a slow, loaded box must not end it.
      let idleSince = Date.now();
      while (
        acked.size < expected &&
        (appended < EVENTS || Date.now() - idleSince < 4 * LEASE_MS)
      ) {
        const batch = await s.claim({ workerId, handlers: HANDLERS, limit: 20, leaseMs: LEASE_MS });
        if (batch.length === 0) {
          await new Promise((r) => setTimeout(r, appended < EVENTS ? 5 : 25));
          continue;
        }
        idleSince = Date.now();
        for (const c of batch) {
          const claimedAt = c.lease.leaseUntil.getTime() - LEASE_MS;
          const prev = held.get(c.id);
          if (prev && prev.until > claimedAt) doubleLeases++;
          held.set(c.id, { worker: workerId, until: c.lease.leaseUntil.getTime() });
          if (c.event.key !== null) {
            const k = `${c.handler}/${c.event.key}`;
            const byIndex = claimTimes.get(k) ?? new Map<number, { first: number; last: number }>();
            const i = (c.event.payload as { i: number }).i;
            const t = byIndex.get(i) ?? { first: claimedAt, last: claimedAt };
            t.first = Math.min(t.first, claimedAt);
            t.last = Math.max(t.last, claimedAt);
            byIndex.set(i, t);
            claimTimes.set(k, byIndex);
          }
        }
        await Promise.all(batch.map((c) => settle(s, c)));
      }
    };

    const settle = async (s: RedisOutboxStore, c: ClaimedDelivery) => {
      const roll = Math.random();
      if (roll < 0.01) return; // crash: the lease expires and another worker takes over
      // Forget the lease before giving it up: Redis may hand the delivery to another worker before
      // this settle's reply arrives. Were that lease still live, this settle would fail (lost > 0).
      held.delete(c.id);
      try {
        if (roll < 0.02) {
          await s.release(c.lease);
        } else if (roll < 0.05) {
          await s.retry(c.lease, Math.floor(Math.random() * 30), {
            name: 'Error',
            message: 'flaky',
            attempt: c.attempt,
            workerId: c.lease.owner,
          });
        } else {
          await s.ack(c.lease);
          const pair = `${c.event.id}/${c.handler}`;
          acked.set(pair, (acked.get(pair) ?? 0) + 1);
        }
      } catch (error) {
        if (!(error instanceof LeaseLostError)) throw error;
        lost++;
      }
    };

    await Promise.all([appending, ...Array.from({ length: CLAIMERS }, (_, n) => worker(n))]);

    // No event of a key is claimed after a later event of that key was first claimed.
    for (const byIndex of claimTimes.values()) {
      let latestEarlier = -Infinity;
      for (const i of [...byIndex.keys()].sort((a, b) => a - b)) {
        const t = byIndex.get(i)!;
        if (t.first < latestEarlier) orderViolations++;
        latestEarlier = Math.max(latestEarlier, t.last);
      }
    }
    expect(claimTimes.size).toBe(HANDLERS.length * 10);
    expect(doubleLeases).toBe(0);
    expect(orderViolations).toBe(0);
    expect(acked.size).toBe(expected);
    expect([...acked.values()].every((n) => n === 1)).toBe(true);
    // Leases only expire for the simulated crashes, and those are never settled late.
    expect(lost).toBe(0);
    expect(await appender.stats()).toMatchObject({ pending: 0, leased: 0, dead: 0, byType: {} });

    let removed = 0;
    await new Promise((r) => setTimeout(r, 5));
    for (;;) {
      const r = await appender.cleanup({
        deliveredRetentionMs: 0,
        deadLetterRetentionMs: 0,
        batchSize: 1000,
      });
      removed += r.events;
      if (r.events === 0) break;
    }
    expect(removed).toBe(EVENTS);
    expect(await keysOf(admin, prefix)).toEqual(baseline);
  }, 120_000);
});

function event(i: number, key: string | null, handlers: string[]): AppendableEvent {
  return {
    id: randomUUID(),
    type: 'race.event',
    payload: { i },
    key,
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers,
  };
}
