import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import {
  AppendableEvent,
  HandlerSubscription,
} from '../../../lib/interfaces/outbox-store.interface';
import { RedisOutboxStore } from '../../../lib/stores/redis';
import { RedisClientLike } from '../../../lib/stores/redis/redis-client';
import { describeWithService } from '../../support/services';
import { connect, dropPrefix, uniquePrefix } from './redis-test-support';

const A: HandlerSubscription = { name: 'A', types: ['t1', 't2'] };
const B: HandlerSubscription = { name: 'B', types: ['t1'] };

function event(type: string, handlers: string[], key: string | null = null): AppendableEvent {
  return {
    id: randomUUID(),
    type,
    payload: { n: 1 },
    key,
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers,
  };
}

/**
 * The client, counting the scripts that ran through it. An EVALSHA refused with NOSCRIPT (a test
 * elsewhere may flush the shared server's script cache) is not counted: its EVAL retry is.
 */
function counting(client: Redis): { client: RedisClientLike; calls: () => number } {
  let calls = 0;
  const wrapped: RedisClientLike & { options: unknown } = {
    options: client.options,
    evalsha: async (...args) => {
      const result = await client.evalsha(...(args as [string, number]));
      calls++;
      return result;
    },
    eval: async (...args) => {
      const result = await client.eval(...(args as [string, number]));
      calls++;
      return result;
    },
    quit: () => client.quit(),
    disconnect: () => client.disconnect(),
  };
  return { client: wrapped, calls: () => calls };
}

describeWithService('redis', 'RedisOutboxStore batches', () => {
  let client: Redis;
  let prefix: string;

  beforeEach(() => {
    client = connect();
    prefix = uniquePrefix('batch');
  });
  afterEach(async () => {
    await dropPrefix(client, prefix);
    await client.quit();
  });

  it('claims a batch of 200 in one script call and acknowledges it in one more', async () => {
    const counter = counting(client);
    const store = new RedisOutboxStore({ client: counter.client, prefix });
    await store.append(Array.from({ length: 100 }, () => event('t1', ['A', 'B'])));
    const before = counter.calls();
    const claimed = await store.claim({
      workerId: 'w1',
      handlers: [A, B],
      limit: 500,
      leaseMs: 60_000,
    });
    expect(claimed).toHaveLength(200);
    expect(counter.calls() - before).toBe(1);
    // One token per claim, as the SQL stores use (a lease is a delivery's: its id and the token).
    expect(new Set(claimed.map((c) => c.lease.token)).size).toBe(1);
    const acked = await store.ackMany(claimed.map((c) => c.lease));
    expect(acked).toHaveLength(200);
    expect(counter.calls() - before).toBe(2);
    expect(await store.stats()).toMatchObject({ pending: 0, leased: 0, dead: 0, byType: {} });
  });

  it('keeps per-type counters exact across batched claims and acks, and drops those that reach zero', async () => {
    const store = new RedisOutboxStore({ client, prefix });
    await store.append([
      ...Array.from({ length: 30 }, (_, i) => event('t1', ['A', 'B'], i % 3 ? null : `k${i % 4}`)),
      ...Array.from({ length: 20 }, () => event('t2', ['A'])),
    ]);
    expect((await store.stats()).byType).toEqual({
      t1: { pending: 60, leased: 0, dead: 0 },
      t2: { pending: 20, leased: 0, dead: 0 },
    });
    const claimed = await store.claim({
      workerId: 'w1',
      handlers: [A, B],
      limit: 1_000,
      leaseMs: 60_000,
    });
    const leasedOf = (type: string) => claimed.filter((c) => c.event.type === type).length;
    const stats = await store.stats();
    expect(stats.leased).toBe(claimed.length);
    expect(stats.byType.t1).toEqual({
      pending: 60 - leasedOf('t1'),
      leased: leasedOf('t1'),
      dead: 0,
    });
    expect(stats.byType.t2).toEqual({
      pending: 20 - leasedOf('t2'),
      leased: leasedOf('t2'),
      dead: 0,
    });

    const [retried, dead, ...rest] = claimed;
    const error = { name: 'Error', message: 'boom', attempt: 1, workerId: 'w1' };
    await store.retry(retried.lease, 0, error);
    await store.deadLetter(dead.lease, 'exhausted', error);
    expect(await store.ackMany(rest.map((c) => c.lease))).toHaveLength(rest.length);
    const after = await store.stats();
    expect(after.leased).toBe(0);
    expect(after.dead).toBe(1);
    expect(after.byType[dead.event.type].dead).toBe(1);

    // Drain the rest (keys handed on, the retried one again), then purge the dead letter.
    for (;;) {
      const next = await store.claim({
        workerId: 'w1',
        handlers: [A, B],
        limit: 1_000,
        leaseMs: 60_000,
      });
      if (next.length === 0) break;
      await store.ackMany(next.map((c) => c.lease));
    }
    await store.purge({ ids: [dead.id] });
    expect(await store.stats()).toMatchObject({ pending: 0, leased: 0, dead: 0, byType: {} });
    // No counter field is left at zero.
    expect(await client.hgetall(`{${prefix}}:cnt`)).toEqual({});
  });
});
