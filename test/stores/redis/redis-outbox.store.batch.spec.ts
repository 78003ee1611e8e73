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

/** The event as a claim returns it: without the append-only `handlers`. */
function strip(e: AppendableEvent) {
  const { handlers: _handlers, ...rest } = e;
  return rest;
}

describeWithService('redis', 'RedisOutboxStore batches', () => {
  let client: Redis;
  let stringNumbers: Redis;
  /** Both clients, for `it.each`: a plain one and one reading integers as strings. */
  const clients = (): Array<[string, () => Redis]> => [
    ['', () => client],
    [' (a client reading integers as strings: ioredis stringNumbers)', () => stringNumbers],
  ];
  let prefix: string;

  beforeEach(() => {
    client = connect();
    stringNumbers = new Redis({ ...client.options, stringNumbers: true });
    prefix = uniquePrefix('batch');
  });
  afterEach(async () => {
    await dropPrefix(client, prefix);
    await client.quit();
    await stringNumbers.quit();
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

  it('completes an event at the ack of its only delivery, and counts n for fan-out and for deliveries an older store wrote', async () => {
    const store = new RedisOutboxStore({ client, prefix });
    const [sole, fanOut, older] = [event('t2', ['A']), event('t1', ['A', 'B']), event('t2', ['A'])];
    await store.append([sole, fanOut, older]);
    const claimed = await store.claim({
      workerId: 'w1',
      handlers: [A, B],
      limit: 10,
      leaseMs: 60_000,
    });
    expect(claimed).toHaveLength(4);
    const of = (e: AppendableEvent) => claimed.filter((c) => c.event.id === e.id);
    const hash = (id: string) => client.hgetall(`{${prefix}}:d:${id}`);
    expect((await hash(of(sole)[0].id)).so).toBe('1');
    for (const c of of(fanOut)) expect((await hash(c.id)).so).toBeUndefined();
    // A delivery as stores before the 'so' mark wrote it.
    await client.hdel(`{${prefix}}:d:${of(older)[0].id}`, 'so');
    const done = async () => (await client.zrange(`{${prefix}}:done`, 0, -1)).sort();

    const [fanA, fanB] = of(fanOut);
    expect(await store.ackMany([of(sole)[0].lease, fanA.lease, of(older)[0].lease])).toHaveLength(
      3,
    );
    expect(await done()).toEqual([sole.id, older.id].sort());
    await store.ack(fanB.lease);
    expect(await done()).toEqual([sole.id, fanOut.id, older.id].sort());
    const n = async (e: AppendableEvent) => client.hget(`{${prefix}}:e:${e.id}`, 'n');
    expect([await n(sole), await n(fanOut), await n(older)]).toEqual(['1', '0', '0']);
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect(
      await store.cleanup({ deliveredRetentionMs: 0, deadLetterRetentionMs: null, batchSize: 100 }),
    ).toEqual({ events: 3, deadLetters: 0 });
    expect(await client.keys(`{${prefix}}:e:*`)).toEqual([]);
  });

  it("purges a dead letter that was its event's only delivery together with the event", async () => {
    const store = new RedisOutboxStore({ client, prefix });
    const e = event('t2', ['A']);
    await store.append([e]);
    const [c] = await store.claim({ workerId: 'w1', handlers: [A], limit: 10, leaseMs: 60_000 });
    await store.deadLetter(c.lease, 'rejected', {
      name: 'E',
      message: 'm',
      attempt: 1,
      workerId: 'w1',
    });
    expect(await store.purge({ ids: [c.id] })).toBe(1);
    expect(await client.exists(`{${prefix}}:e:${e.id}`)).toBe(0);
  });

  it.each(clients())(
    'decodes every field of a claimed delivery, including a type its handler does not list and headers%s',
    async (_, use) => {
      const store = new RedisOutboxStore({ client: use(), prefix });
      const at = new Date(Date.now() - 60_000);
      const plain = { ...event('t1', ['A', 'B'], 'k1'), occurredAt: at, availableAt: at };
      const other = { ...event('t9', ['B']), headers: { traceparent: 'x', empty: '' } };
      await store.append([plain, other]);
      const claimed = await store.claim({
        workerId: 'w1',
        handlers: [A, B],
        limit: 10,
        leaseMs: 60_000,
      });
      const got = claimed.map((c) => ({ handler: c.handler, attempt: c.attempt, event: c.event }));
      expect(got).toEqual([
        { handler: 'A', attempt: 1, event: strip(plain) },
        { handler: 'B', attempt: 1, event: strip(plain) },
        { handler: 'B', attempt: 1, event: { ...strip(other), availableAt: expect.any(Date) } },
      ]);
    },
  );

  it.each(clients())(
    'returns ids, keys, payloads and headers of any content exactly as appended (the reply is JSON)%s',
    async (_, use) => {
      const store = new RedisOutboxStore({ client: use(), prefix });
      const texts = [
        '"]},{"x":1}]',
        '\\"\\',
        '/\\/ </script>',
        '\u0000\u0001\u001f\u007f\b\f\n\r\t',
        '\u2028\u2029',
        'é ü ß 中文 😀',
        '\ud800 lone \udfff',
        'null',
        ',',
      ];
      const payloads: unknown[] = [
        null,
        ...texts,
        2 ** 70,
        Number.MAX_SAFE_INTEGER + 2,
        1e21,
        -0.000001,
        { nested: { list: [texts, { deeper: [null, true, false, 0] }] }, ']': '[' },
        [[[]]],
        {},
        '',
      ];
      // Ids and keys go to Redis as UTF-8 arguments, which cannot carry a lone surrogate.
      const plain = texts.filter((t) => !t.includes(' lone '));
      const events = payloads.map((payload, i) => ({
        ...event('t1', ['A']),
        // The store itself takes any event id (the service makes UUIDs).
        id: i % 2 ? randomUUID() : `ev ${i} ${plain[i % plain.length]}`,
        // Distinct keys, so no delivery waits behind another of its key.
        key: i % 3 ? `${plain[i % plain.length]} ${i}` : null,
        headers: i % 4 ? { [texts[i % texts.length]]: texts[(i + 1) % texts.length] } : {},
        payload,
      }));
      // A type no handler of the claim names, with every character a type may have.
      events.push({ ...event('Odd.type_9:x-y', ['A']), payload: texts });
      await store.append(events);
      const claimed = await store.claim({
        workerId: 'w1',
        handlers: [A],
        limit: 100,
        leaseMs: 60_000,
      });
      const expected = events.map((e) => ({
        ...strip(e),
        // What JSON keeps of a payload, as every store returns it.
        payload: JSON.parse(JSON.stringify(e.payload)),
        availableAt: expect.any(Date),
      }));
      expect(claimed.map((c) => c.event)).toEqual(expected);
      expect(claimed.map((c) => [c.handler, c.attempt, c.lease.owner])).toEqual(
        events.map(() => ['A', 1, 'w1']),
      );
      // Each delivery has objects of its own.
      expect(new Set(claimed.map((c) => c.event.headers)).size).toBe(claimed.length);
    },
  );

  it('claims a batch of many reply chunks in order, small deliveries and ones larger than a chunk', async () => {
    const store = new RedisOutboxStore({ client, prefix });
    const big = 'x"]\\'.repeat(200_000); // 1.2 MB of text, escaped as JSON
    const events = [
      // Small ones of varying sizes: chunk boundaries (under 8000 bytes) fall anywhere.
      ...Array.from({ length: 80 }, (_, i) => ({
        ...event('t1', ['A'], i % 2 ? `k${i} "]` : null),
        payload: { i, text: '"],['.repeat((i * 37) % 300) },
      })),
      ...Array.from({ length: 12 }, (_, i) => ({
        ...event('t1', ['A'], i % 2 ? `k${i}` : null),
        payload: { i, text: `${i}`.repeat(150_000) },
      })),
      { ...event('t1', ['A']), payload: big },
      { ...event('t1', ['A']), payload: { last: true } },
    ];
    await store.append(events);
    const claimed = await store.claim({
      workerId: 'w1',
      handlers: [A],
      limit: 100,
      leaseMs: 60_000,
    });
    expect(claimed.map((c) => c.event.id)).toEqual(events.map((e) => e.id));
    claimed.forEach((c, i) => expect(c.event.payload).toEqual(events[i].payload));
    expect(claimed.map((c) => c.event.key)).toEqual(events.map((e) => e.key));
    expect(await store.ackMany(claimed.map((c) => c.lease))).toHaveLength(events.length);
  }, 30_000);

  it('keeps the claim reply valid whatever occurredAt a direct store append stored', async () => {
    const store = new RedisOutboxStore({ client, prefix });
    const bad = { ...event('t1', ['A']), occurredAt: new Date(NaN) };
    const good = event('t1', ['A']);
    await store.append([bad, good]);
    const claimed = await store.claim({
      workerId: 'w1',
      handlers: [A],
      limit: 10,
      leaseMs: 60_000,
    });
    expect(claimed.map((c) => c.event.id)).toEqual([bad.id, good.id]);
    expect(Number.isNaN(claimed[0].event.occurredAt.getTime())).toBe(true);
    expect(claimed[1].event.occurredAt).toEqual(good.occurredAt);
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
