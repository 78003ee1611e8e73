import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import {
  AppendableEvent,
  ClaimedDelivery,
  HandlerSubscription,
} from '../../../lib/interfaces/outbox-store.interface';
import { RedisOutboxStore } from '../../../lib/stores/redis';
import { describeWithService } from '../../support/services';
import { connect, dropPrefix, keysOf, uniquePrefix } from './redis-test-support';

const A: HandlerSubscription = { name: 'A', types: ['t'] };
const cleanupNow = { deliveredRetentionMs: 0, deadLetterRetentionMs: null, batchSize: 5_000 };
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function event(overrides: Partial<AppendableEvent> = {}): AppendableEvent {
  return {
    id: randomUUID(),
    type: 't',
    payload: {},
    key: null,
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers: ['A'],
    ...overrides,
  };
}

describeWithService('redis', 'RedisOutboxStore ackMany', () => {
  let client: Redis;
  let prefix: string;
  let store: RedisOutboxStore;
  const claim = (limit = 10, workerId = 'w1', leaseMs = 60_000) =>
    store.claim({ workerId, handlers: [A], limit, leaseMs });

  beforeEach(() => {
    client = connect();
    prefix = uniquePrefix('ackmany');
    store = new RedisOutboxStore({ client, prefix });
  });
  afterEach(async () => {
    await dropPrefix(client, prefix);
    await client.quit();
  });

  it('acknowledges more than 1,000 leases (several script calls), with forged ones mixed in', async () => {
    const events = Array.from({ length: 1_203 }, (_, i) => event({ payload: { i } }));
    for (let i = 0; i < events.length; i += 500) await store.append(events.slice(i, i + 500));
    const claimed: ClaimedDelivery[] = [];
    for (let batch = await claim(500); batch.length > 0; batch = await claim(500))
      claimed.push(...batch);
    expect(claimed).toHaveLength(1_203);
    const forged = new Set(claimed.filter((_, i) => i % 97 === 0).map((c) => c.id));
    const acked = await store.ackMany(
      claimed.map((c) => (forged.has(c.id) ? { ...c.lease, token: randomUUID() } : c.lease)),
    );
    expect(new Set(acked)).toEqual(
      new Set(claimed.filter((c) => !forged.has(c.id)).map((c) => c.id)),
    );
    expect(acked).toHaveLength(1_203 - forged.size);
    expect(await store.stats()).toMatchObject({ pending: 0, leased: forged.size });
    const rest = await store.ackMany(claimed.filter((c) => forged.has(c.id)).map((c) => c.lease));
    expect(rest.sort()).toEqual([...forged].sort());
    expect(await store.stats()).toMatchObject({ pending: 0, leased: 0, dead: 0, byType: {} });
  });

  it('acknowledges only owned, live leases out of a mixed batch and leaves the others unchanged', async () => {
    await store.append(Array.from({ length: 6 }, () => event()));
    const [owned, wrongToken, wrongOwner, taken, lapsed, done] = await claim(6, 'w1', 300);
    await store.ack(done.lease);
    await sleep(400);
    // `taken` expired and another worker holds it now; `lapsed` expired and was not taken again.
    const fresh = await claim(4, 'w2');
    expect(fresh.map((c) => c.id)).toEqual([owned.id, wrongToken.id, wrongOwner.id, taken.id]);
    const hashes = () =>
      Promise.all(
        [wrongToken, wrongOwner, taken, lapsed].map((c) => client.hgetall(`{${prefix}}:d:${c.id}`)),
      );
    const before = await hashes();
    const acked = await store.ackMany([
      fresh[0].lease,
      fresh[0].lease,
      { ...fresh[1].lease, token: randomUUID() },
      { ...fresh[2].lease, owner: 'w3' },
      taken.lease,
      lapsed.lease,
      done.lease,
      { ...owned.lease, deliveryId: randomUUID() },
      { ...owned.lease, deliveryId: 'not-a-uuid' },
    ]);
    expect(acked).toEqual([owned.id]);
    expect(await hashes()).toEqual(before);
    // The claim swept the lapsed lease back to pending; its old lease stays refused.
    expect(before[3]).toMatchObject({ st: 'p' });
    expect(before[3].o).toBeUndefined();
  });

  it("answers by position whatever the ids: 36-character ids of other bytes among a claim's own", async () => {
    await store.append(Array.from({ length: 4 }, () => event()));
    const batch = await claim(4);
    const lease = batch[0].lease;
    // Ids of one owner and token travel packed 36 bytes apart unless one is not 36 ASCII
    // characters: each of these forces the other form, or is refused in the packed one.
    const odd = ['é'.repeat(36), 'x'.repeat(36), '😀'.repeat(18), 'y'.repeat(35), 'z'.repeat(37)];
    const acked = await store.ackMany([
      batch[0].lease,
      ...odd.map((deliveryId) => ({ ...lease, deliveryId })),
      batch[1].lease,
    ]);
    expect(acked).toEqual([batch[0].id, batch[1].id]);
    // A group of the claim's own ids (packed) next to a group holding an odd id (not packed).
    const other = { ...lease, owner: 'w9' };
    const rest = await store.ackMany([
      batch[2].lease,
      { ...other, deliveryId: 'é'.repeat(36) },
      { ...other, deliveryId: batch[3].id },
      batch[3].lease,
    ]);
    expect(rest).toEqual([batch[2].id, batch[3].id]);
    expect(await store.stats()).toMatchObject({ pending: 0, leased: 0 });
  });

  it('acknowledges leases of several claims given interleaved, and refuses the stale lease of a delivery its worker claimed again', async () => {
    await store.append(Array.from({ length: 6 }, () => event()));
    const first = await claim(3, 'w1', 300);
    const second = await claim(3, 'w1');
    await sleep(400);
    // The first claim's leases expired; the same worker claims those deliveries again.
    const third = await claim(3, 'w1');
    expect(third.map((c) => c.id)).toEqual(first.map((c) => c.id));
    expect(new Set([first, second, third].map((b) => b[0].lease.token)).size).toBe(3);
    const mixed = [0, 1, 2].flatMap((i) => [first[i].lease, second[i].lease, third[i].lease]);
    const acked = await store.ackMany(mixed);
    expect(acked.sort()).toEqual([...second, ...third].map((c) => c.id).sort());
    expect(await store.stats()).toMatchObject({ pending: 0, leased: 0, dead: 0, byType: {} });
  });

  it('hands the key on to its next event, as ack does', async () => {
    const [e1, e2, e3] = [event({ key: 'k' }), event({ key: 'k' }), event({ key: 'j' })];
    await store.append([e1, e2, e3]);
    const first = await claim();
    expect(first.map((c) => c.event.id)).toEqual([e1.id, e3.id]);
    expect(await store.ackMany(first.map((c) => c.lease))).toHaveLength(2);
    expect((await claim()).map((c) => c.event.id)).toEqual([e2.id]);
  });

  it('leaves the keys exactly as ack does, so cleanup removes the event alike', async () => {
    const [one, two] = [event(), event()];
    await store.append([one]);
    const [a] = await claim();
    await store.ack(a.lease);
    const afterAck = (await keysOf(client, prefix)).sort();
    const eventHash = (id: string) => client.hgetall(`{${prefix}}:e:${id}`);
    const ackedEvent = await eventHash(one.id);

    await dropPrefix(client, prefix);
    await store.append([two]);
    const [b] = await claim();
    expect(await store.ackMany([b.lease])).toEqual([b.id]);
    const rename = (keys: string[]) =>
      keys.map((k) => k.replace(two.id, 'EV').replace(one.id, 'EV')).sort();
    expect(rename(await keysOf(client, prefix))).toEqual(rename(afterAck));
    const { oa: _oa1, c: _c1, ...restAck } = ackedEvent;
    const { oa: _oa2, c: _c2, ...restMany } = await eventHash(two.id);
    expect(restMany).toEqual({ ...restAck, av: restMany.av });
    // The event's only delivery completes it without counting n down (see 'so' in the layout).
    expect(restMany.n).toBe('1');
    expect(await client.zscore(`{${prefix}}:done`, two.id)).not.toBeNull();
    expect(await client.exists(`{${prefix}}:d:${b.id}`)).toBe(0);

    await sleep(5);
    expect(await store.cleanup(cleanupNow)).toEqual({ events: 1, deadLetters: 0 });
    expect(await client.exists(`{${prefix}}:e:${two.id}`)).toBe(0);
  });
});
