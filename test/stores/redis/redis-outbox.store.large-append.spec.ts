import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { AppendableEvent, DuplicateEventError, HandlerSubscription } from 'nestjs-outbox';
import { RedisOutboxStore } from '../../../lib/stores/redis';
import { describeWithService } from '../../support/services';
import { connect, dropPrefix, keysOf, uniquePrefix } from './redis-test-support';

const A: HandlerSubscription = { name: 'A', types: ['t'] };
const MiB = 1024 * 1024;

/** An event whose serialized payload is about 1 MiB (the default payload limit). */
function big(i: number, overrides: Partial<AppendableEvent> = {}): AppendableEvent {
  return {
    id: randomUUID(),
    type: 't',
    payload: { i, blob: String(i % 10).repeat(MiB - 64) },
    key: null,
    headers: { n: String(i) },
    occurredAt: new Date(),
    availableAt: null,
    handlers: ['A'],
    ...overrides,
  };
}

const argBytes = (args: unknown[]) =>
  args.reduce<number>((sum, a) => sum + Buffer.byteLength(String(a)), 0);

describeWithService('redis', 'RedisOutboxStore large appends', () => {
  let client: Redis;
  let prefix: string;
  /** Bytes of each script call the store sent, in order. */
  let calls: number[];
  let failOnCall: number | null;

  beforeEach(() => {
    client = connect();
    prefix = uniquePrefix('big');
    calls = [];
    failOnCall = null;
    const evalsha = client.evalsha.bind(client) as (...a: unknown[]) => Promise<unknown>;
    (client as unknown as { evalsha: unknown }).evalsha = (...args: unknown[]) => {
      calls.push(argBytes(args));
      if (failOnCall === calls.length) return Promise.reject(new Error('connection lost'));
      return evalsha(...args);
    };
  });
  afterEach(async () => {
    await dropPrefix(client, prefix);
    await client.quit();
  });

  const stageKeys = async () => (await keysOf(client, prefix)).filter((k) => k.includes(':stage:'));

  async function claimAll(store: RedisOutboxStore) {
    const claimed = await store.claim({
      workerId: 'w',
      handlers: [A],
      limit: 1000,
      leaseMs: 60_000,
    });
    return claimed;
  }

  it('sends a small batch in one call', async () => {
    const store = new RedisOutboxStore({ client, prefix });
    await store.append(Array.from({ length: 10 }, (_, i) => ({ ...big(i), payload: { i } })));
    expect(calls).toHaveLength(1);
  });

  it('splits 64 × 1 MiB payloads into calls of at most 8 MiB and commits them all', async () => {
    const store = new RedisOutboxStore({ client, prefix });
    const events = Array.from({ length: 64 }, (_, i) => big(i));
    const stored = await store.append(events);
    expect(stored.map((e) => e.id)).toEqual(events.map((e) => e.id));
    // 64 MiB went as 8 stage calls of 7 events (7 MiB each) plus a rest, then one small commit.
    expect(calls.length).toBeGreaterThanOrEqual(9);
    for (const bytes of calls) expect(bytes).toBeLessThanOrEqual(8 * MiB + 64 * 1024);
    expect(calls[calls.length - 1]).toBeLessThan(MiB);
    expect(await stageKeys()).toEqual([]);
    const claimed = await claimAll(store);
    expect(claimed).toHaveLength(64);
    const byId = new Map(claimed.map((c) => [c.event.id, c.event]));
    for (const e of events) {
      expect(byId.get(e.id)?.payload).toEqual(e.payload);
      expect(byId.get(e.id)?.headers).toEqual(e.headers);
    }
  }, 120_000);

  it('stays all or nothing: a conflicting id at the end of a large batch writes none of it', async () => {
    const store = new RedisOutboxStore({ client, prefix, appendChunkBytes: 4 * MiB });
    const existing = big(0, { payload: { small: true } });
    await store.append([existing]);
    const batch = [
      ...Array.from({ length: 15 }, (_, i) => big(i + 1)),
      big(99, { id: existing.id }),
    ];
    await expect(store.append(batch)).rejects.toBeInstanceOf(DuplicateEventError);
    expect(calls.length).toBeGreaterThan(3);
    expect(await stageKeys()).toEqual([]);
    const claimed = await claimAll(store);
    expect(claimed.map((c) => c.event.id)).toEqual([existing.id]);
    expect(claimed[0].event.payload).toEqual({ small: true });
    // An id of the refused batch is still free for new content.
    await store.append([{ ...batch[0], payload: { again: true } }]);
  }, 120_000);

  it('appends nothing and leaves no staged data when a call fails midway', async () => {
    const store = new RedisOutboxStore({ client, prefix, appendChunkBytes: 2 * MiB });
    const events = Array.from({ length: 8 }, (_, i) => big(i));
    failOnCall = 3; // the third stage call
    await expect(store.append(events)).rejects.toThrow('connection lost');
    expect(await stageKeys()).toEqual([]);
    expect((await store.stats()).pending).toBe(0);
    failOnCall = null;
    // Retrying the same batch works and commits every event once.
    await store.append(events);
    expect(await claimAll(store)).toHaveLength(8);
    expect(await stageKeys()).toEqual([]);
  }, 120_000);

  it('appends nothing when the commit call fails after staging', async () => {
    const store = new RedisOutboxStore({ client, prefix, appendChunkBytes: 2 * MiB });
    const events = Array.from({ length: 4 }, (_, i) => big(i));
    // 4 × 1 MiB with 2 MiB calls: stage calls 1 and 2, the commit is call 3.
    failOnCall = 3;
    await expect(store.append(events)).rejects.toThrow('connection lost');
    expect(calls).toHaveLength(4); // the 4th dropped the stage hash
    expect(await stageKeys()).toEqual([]);
    expect((await store.stats()).pending).toBe(0);
  }, 60_000);

  it('gives staged data a time to live, so an interrupted append cannot leak it', async () => {
    const store = new RedisOutboxStore({ client, prefix, appendChunkBytes: 2 * MiB });
    let ttl = -2;
    const events = Array.from({ length: 4 }, (_, i) => big(i));
    const evalsha = client.evalsha.bind(client) as (...a: unknown[]) => Promise<unknown>;
    (client as unknown as { evalsha: unknown }).evalsha = async (...args: unknown[]) => {
      const result = await evalsha(...args);
      const [key] = await stageKeys();
      if (key && ttl === -2) ttl = await client.pttl(key);
      return result;
    };
    await store.append(events);
    expect(ttl).toBeGreaterThan(60_000);
    expect(ttl).toBeLessThanOrEqual(10 * 60_000);
  }, 60_000);
});
