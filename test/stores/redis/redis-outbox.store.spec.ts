import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import {
  AppendableEvent,
  HandlerSubscription,
  MissingDependencyError,
  OutboxOptionsError,
  OutboxValidationError,
  ResolvedOutboxOptions,
} from 'nestjs-outbox';
import { createRedisOutboxStore, RedisOutboxStore } from '../../../lib/stores/redis';
import type { StoreFactoryContext } from '../../../lib/stores/store-factory-context';
import { describeWithService, SERVICES } from '../../support/services';
import { connect, dropPrefix, keysOf, uniquePrefix } from './redis-test-support';

const A: HandlerSubscription = { name: 'A', types: ['t'] };

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

const ctx = {} as StoreFactoryContext;
const url = `redis://${SERVICES.redis.host}:${SERVICES.redis.port}`;

describeWithService('redis', 'RedisOutboxStore specifics', () => {
  let client: Redis;
  let prefix: string;
  let store: RedisOutboxStore;
  const claim = (handlers = [A], workerId = 'w') =>
    store.claim({ workerId, handlers, limit: 10, leaseMs: 10_000 });

  beforeEach(() => {
    client = connect();
    prefix = uniquePrefix('spec');
    store = new RedisOutboxStore({ client, prefix });
  });
  afterEach(async () => {
    await dropPrefix(client, prefix);
    await client.quit();
  });

  describe('per-key order with late deliveries', () => {
    it('runs an older event expanded late before a newer one of the same key', async () => {
      const e1 = event({ key: 'k', handlers: [] });
      const e2 = event({ key: 'k', handlers: ['A'] });
      await store.append([e1]);
      await store.append([e2]);
      const first = await claim();
      expect(first.map((c) => c.event.id)).toEqual([e1.id]);
      await store.ack(first[0].lease);
      expect((await claim()).map((c) => c.event.id)).toEqual([e2.id]);
    });

    it('lets a newer delivery that is already running finish, then runs the older one', async () => {
      const e1 = event({ key: 'k', handlers: [] });
      const e2 = event({ key: 'k', handlers: ['A'] });
      await store.append([e1, e2]);
      // A worker that does not subscribe to type t claims A's explicit delivery without expanding.
      const [running] = await claim([{ name: 'A', types: [] }]);
      expect(running.event.id).toBe(e2.id);
      expect(await claim()).toHaveLength(0);
      await store.retry(running.lease, 0, {
        name: 'Error',
        message: 'x',
        attempt: 1,
        workerId: 'w',
      });
      // After its retry the newer one yields to the older event it now waits behind.
      const next = await claim();
      expect(next.map((c) => c.event.id)).toEqual([e1.id]);
      await store.ack(next[0].lease);
      expect((await claim()).map((c) => c.event.id)).toEqual([e2.id]);
    });

    it('puts a replayed dead letter back in front of its key', async () => {
      const [e1, e2] = [event({ key: 'k' }), event({ key: 'k' })];
      await store.append([e1, e2]);
      const [c1] = await claim();
      await store.deadLetter(c1.lease, 'rejected', {
        name: 'Error',
        message: 'x',
        attempt: 1,
        workerId: 'w',
      });
      expect(await store.replay({ ids: [c1.id] })).toBe(1);
      const next = await claim();
      expect(next.map((c) => c.event.id)).toEqual([e1.id]);
    });

    it('never lets a keyed delivery overtake older unexpanded events of its key, even past the sweep', async () => {
      const s = new RedisOutboxStore({ client, prefix, claimSweepLimit: 2 });
      const tomorrow = new Date(Date.now() + 86_400_000);
      // Older scheduled placeholders fill the sweep, so the key's own placeholders stay behind it.
      await s.append(
        Array.from({ length: 4 }, (_, i) =>
          event({ key: `other-${i}`, handlers: [], availableAt: tomorrow }),
        ),
      );
      const older = Array.from({ length: 5 }, (_, n) =>
        event({ key: 'k', handlers: [], payload: { n } }),
      );
      for (const e of older) await s.append([e]);
      const last = event({ key: 'k', payload: { n: 5 } });
      await s.append([last]);
      const seen: string[] = [];
      for (let round = 0; round < 20 && seen.length < 6; round++) {
        const got = await s.claim({ workerId: 'w', handlers: [A], limit: 10, leaseMs: 10_000 });
        expect(got.length).toBeLessThanOrEqual(1);
        for (const c of got) {
          seen.push(c.event.id);
          await s.ack(c.lease);
        }
      }
      expect(seen).toEqual([...older, last].map((e) => e.id));
    });

    /** A store whose claim sweep expands one event per type, and that backlog in front of it. */
    async function behindBacklog(types: string[]): Promise<RedisOutboxStore> {
      const s = new RedisOutboxStore({ client, prefix, claimSweepLimit: 1 });
      const tomorrow = new Date(Date.now() + 86_400_000);
      await s.append(
        types.map((type) => event({ type, key: 'other', handlers: [], availableAt: tomorrow })),
      );
      return s;
    }

    it('holds a handler behind an unexpanded event of any of its types with the same key', async () => {
      const s = await behindBacklog(['t', 'u']);
      const e1 = event({ type: 'u', key: 'k', handlers: [] });
      const e2 = event({ key: 'k', handlers: ['A'] });
      await s.append([e1]);
      await s.append([e2]);
      const both: HandlerSubscription = { name: 'A', types: ['t', 'u'] };
      const take = () => s.claim({ workerId: 'w', handlers: [both], limit: 10, leaseMs: 10_000 });
      const first = await take();
      expect(first.map((c) => c.event.id)).toEqual([e1.id]);
      await s.ack(first[0].lease);
      expect((await take()).map((c) => c.event.id)).toEqual([e2.id]);
    });

    it('claims the expanded older event for every handler of the key in one call', async () => {
      const s = await behindBacklog(['t']);
      const B: HandlerSubscription = { name: 'B', types: ['t'] };
      const e1 = event({ key: 'k', handlers: [] });
      const e2 = event({ key: 'k', handlers: ['A', 'B'] });
      await s.append([e1]);
      await s.append([e2]);
      const take = () => s.claim({ workerId: 'w', handlers: [A, B], limit: 10, leaseMs: 10_000 });
      const first = await take();
      expect(first.map((c) => `${c.event.id}/${c.handler}`).sort()).toEqual(
        [`${e1.id}/A`, `${e1.id}/B`].sort(),
      );
      for (const c of first) await s.ack(c.lease);
      expect((await take()).map((c) => `${c.event.id}/${c.handler}`).sort()).toEqual(
        [`${e2.id}/A`, `${e2.id}/B`].sort(),
      );
    });

    it('leaves no per-key index of unexpanded events behind once they are expanded', async () => {
      // Sweep of one: the first claim expands the k2 event by sweep and the k one for its key.
      const s = new RedisOutboxStore({ client, prefix, claimSweepLimit: 1 });
      await s.append([event({ key: 'k2', handlers: [] })]);
      await s.append([event({ key: 'k', handlers: [] })]);
      await s.append([event({ key: 'k', handlers: ['A'] })]);
      expect(await client.exists(`{${prefix}}:uk:1:t:k`)).toBe(1);
      for (let round = 0; round < 5; round++) {
        const got = await s.claim({ workerId: 'w', handlers: [A], limit: 10, leaseMs: 10_000 });
        for (const c of got) await s.ack(c.lease);
      }
      await new Promise((r) => setTimeout(r, 5));
      await s.cleanup({ deliveredRetentionMs: 0, deadLetterRetentionMs: 0, batchSize: 100 });
      expect(await keysOf(client, prefix)).toEqual([`{${prefix}}:seq`]);
    });
  });

  describe('dead-letter summary', () => {
    // Used to stop reading at summaryScanLimit (100,000 by default) and report what it had read
    // as the whole: counts too low, with nothing in the answer to say so.
    it('counts every dead letter, page after bounded page, whatever summaryScanLimit says', async () => {
      const s = new RedisOutboxStore({
        client,
        prefix,
        deadLetterScanLimit: 7,
        summaryScanLimit: 10,
      });
      const count = 1100;
      await s.append(Array.from({ length: count }, () => event()));
      let dead = 0;
      while (dead < count) {
        const claimed = await s.claim({
          workerId: 'w',
          handlers: [A],
          limit: 500,
          leaseMs: 60_000,
        });
        expect(claimed.length).toBeGreaterThan(0);
        for (const c of claimed) {
          const n = dead++;
          await s.deadLetter(c.lease, 'rejected', {
            name: n % 3 === 0 ? 'TypeError' : 'Error',
            message: `order ${n} rejected`,
            attempt: 1,
            workerId: 'w',
          });
        }
      }
      const rows = await s.summarizeDeadLetters({});
      expect(rows).toEqual([
        {
          type: 't',
          handler: 'A',
          errorName: 'Error',
          fingerprint: 'order <n> rejected',
          count: 733,
        },
        {
          type: 't',
          handler: 'A',
          errorName: 'TypeError',
          fingerprint: 'order <n> rejected',
          count: 367,
        },
      ]);
      expect(await s.summarizeDeadLetters({ type: 'other' })).toEqual([]);
    }, 60_000);
  });

  describe('retry delay and error text', () => {
    it.each([NaN, Infinity, -Infinity, -5])('treats a retry delay of %p as 0', async (delay) => {
      await store.append([event()]);
      const [c] = await claim();
      await store.retry(c.lease, delay, { name: 'Error', message: 'x', attempt: 1, workerId: 'w' });
      const stats = await store.stats();
      expect([stats.pending, stats.due]).toEqual([1, 1]);
      expect(await claim()).toHaveLength(1);
    });

    it('keeps error names, messages and worker ids of any content exactly', async () => {
      const texts = [
        '',
        'a\u0000b',
        'quote " backslash \\ slash / newline \n tab \t',
        'ünïcødé 日本語 😀',
        'cut mid-pair \ud83d',
        '\udfff lone low',
        '{"looks":"like json"}',
        '[]',
        '123',
        'null',
        '\u2028\u2029\u007f\u0001',
        '\\u0000 (escaped text, not a NUL)',
        'x'.repeat(4096),
      ];
      await store.append([event()]);
      let [c] = await claim();
      const id = c.id;
      for (let i = 0; i < texts.length; i++) {
        const error = { name: texts[i], message: texts[i], attempt: i + 1, workerId: texts[i] };
        if (i < texts.length - 1) {
          await store.retry(c.lease, 0, error);
          [c] = await claim();
        } else {
          await store.deadLetter(c.lease, 'exhausted', error);
        }
      }
      const dl = await store.getDeadLetter(id);
      const kept = texts.slice(-dl!.errors.length);
      expect(dl!.errors.map((e) => [e.name, e.message, e.workerId])).toEqual(
        kept.map((t) => [t, t, t]),
      );
      const [row] = await store.summarizeDeadLetters({});
      expect(row.errorName).toBe(texts[texts.length - 1]);
    });

    it('still reads error entries stored as plain strings', async () => {
      await store.append([event()]);
      const [c] = await claim();
      await store.deadLetter(c.lease, 'rejected', {
        name: 'Error',
        message: 'new',
        attempt: 1,
        workerId: 'w',
      });
      const legacy = [
        { name: 'TypeError', message: 'old "one"', attempt: 1, workerId: 'w0', at: '1000' },
      ];
      await client.hset(`{${prefix}}:d:${c.id}`, 'er', JSON.stringify(legacy));
      const dl = await store.getDeadLetter(c.id);
      expect(dl!.errors).toEqual([
        { name: 'TypeError', message: 'old "one"', attempt: 1, workerId: 'w0', at: new Date(1000) },
      ]);
    });
  });

  it('refuses a SQL transaction handle instead of pretending to join it', async () => {
    await expect(store.append([event()], { manager: {} })).rejects.toBeInstanceOf(
      OutboxValidationError,
    );
    expect((await store.stats()).pending).toBe(0);
  });

  it('keeps every key of one outbox under its {prefix} hash tag', async () => {
    await store.append([
      event({ key: 'k' }),
      event({ handlers: [] }),
      event({ availableAt: new Date(Date.now() + 60_000) }),
    ]);
    const [c] = await claim();
    await store.deadLetter(c.lease, 'rejected', {
      name: 'Error',
      message: 'x',
      attempt: 1,
      workerId: 'w',
    });
    const keys = await client.keys('*');
    const ours = keys.filter((k) => k.includes(prefix));
    expect(ours.length).toBeGreaterThan(5);
    expect(ours.every((k) => k.startsWith(`{${prefix}}:`))).toBe(true);
  });

  it('honours an ioredis keyPrefix on the application client', async () => {
    const prefixed = new Redis({
      host: SERVICES.redis.host,
      port: SERVICES.redis.port,
      keyPrefix: 'app:',
    });
    const s = new RedisOutboxStore({ client: prefixed, prefix });
    await s.append([event({ key: 'k' })]);
    const [c] = await s.claim({ workerId: 'w', handlers: [A], limit: 1, leaseMs: 10_000 });
    await s.ack(c.lease);
    const keys = await client.keys(`*${prefix}*`);
    expect(keys.length).toBeGreaterThan(0);
    expect(keys.every((k) => k.startsWith(`app:{${prefix}}:`))).toBe(true);
    await Promise.all(keys.map((k) => client.del(k)));
    await prefixed.quit();
  });

  it('recovers when the server forgets its scripts (restart, failover)', async () => {
    await store.append([event()]);
    await client.script('FLUSH');
    expect(await claim()).toHaveLength(1);
  });

  it('claims with bounded work per call on a large backlog of unexpanded events', async () => {
    const s = new RedisOutboxStore({ client, prefix, claimSweepLimit: 5 });
    await s.append(Array.from({ length: 12 }, () => event({ handlers: [] })));
    const first = await s.claim({ workerId: 'w', handlers: [A], limit: 100, leaseMs: 10_000 });
    expect(first).toHaveLength(5);
    const rest = [
      ...(await s.claim({ workerId: 'w', handlers: [A], limit: 100, leaseMs: 10_000 })),
      ...(await s.claim({ workerId: 'w', handlers: [A], limit: 100, leaseMs: 10_000 })),
    ];
    expect(rest).toHaveLength(7);
  });

  it('pages dead letters under a scan bound without losing any', async () => {
    const s = new RedisOutboxStore({ client, prefix, deadLetterScanLimit: 3 });
    const wanted = new Set<string>();
    for (let i = 0; i < 10; i++) {
      await s.append([event({ type: i % 3 === 0 ? 'x' : 't', handlers: ['A'] })]);
      const [c] = await s.claim({
        workerId: 'w',
        handlers: [{ name: 'A', types: [] }],
        limit: 1,
        leaseMs: 10_000,
      });
      await s.deadLetter(c.lease, 'rejected', {
        name: 'Error',
        message: 'x',
        attempt: 1,
        workerId: 'w',
      });
      if (i % 3 === 0) wanted.add(c.id);
    }
    const seen: string[] = [];
    let cursor: string | undefined;
    for (let pages = 0; pages < 20; pages++) {
      const page = await s.listDeadLetters({ limit: 2, type: 'x', cursor });
      seen.push(...page.items.map((d) => d.id));
      if (!page.nextCursor) break;
      cursor = page.nextCursor;
    }
    expect(new Set(seen)).toEqual(wanted);
    expect(seen).toHaveLength(wanted.size);
    expect(await s.replay({ filter: { type: 'x' } })).toBe(4);
    expect(await s.purge({ filter: {} })).toBe(6);
  });
});

describeWithService('redis', 'createRedisOutboxStore', () => {
  it('uses the application client and never closes it', async () => {
    const client = connect();
    const prefix = uniquePrefix('factory');
    const store = await createRedisOutboxStore({ type: 'redis', client, prefix }, ctx);
    await store.append([event()]);
    await store.close?.();
    expect(client.status).toBe('ready');
    expect(await keysOf(client, prefix)).not.toHaveLength(0);
    await dropPrefix(client, prefix);
    await client.quit();
  });

  it('creates a client from url and closes it in close()', async () => {
    const name = `outbox-${randomUUID().slice(0, 8)}`;
    const admin = connect();
    const store = await createRedisOutboxStore(
      {
        type: 'redis',
        url,
        prefix: uniquePrefix('factory'),
        redisOptions: { connectionName: name },
      },
      ctx,
    );
    expect(await store.now()).toBeInstanceOf(Date);
    expect(await admin.client('LIST')).toContain(`name=${name}`);
    await store.close?.();
    await new Promise((r) => setTimeout(r, 50));
    expect(await admin.client('LIST')).not.toContain(`name=${name}`);
    await admin.quit();
  });

  it('closes the client it created from url when the options are refused', async () => {
    const name = `outbox-${randomUUID().slice(0, 8)}`;
    const admin = connect();
    await expect(
      createRedisOutboxStore(
        { type: 'redis', url, prefix: 'a{b}', redisOptions: { connectionName: name } },
        ctx,
      ),
    ).rejects.toBeInstanceOf(OutboxOptionsError);
    await new Promise((r) => setTimeout(r, 200));
    expect(await admin.client('LIST')).not.toContain(`name=${name}`);
    await admin.quit();
  });

  it('refuses options without a client or url, or with something that is not a client', async () => {
    await expect(createRedisOutboxStore({ type: 'redis' }, ctx)).rejects.toBeInstanceOf(
      OutboxOptionsError,
    );
    await expect(createRedisOutboxStore({ type: 'redis', client: {} }, ctx)).rejects.toThrow(
      /ioredis client/,
    );
    expect(() => new RedisOutboxStore({ client: connectLazy(), prefix: 'a{b}' })).toThrow(
      OutboxOptionsError,
    );
  });

  it('names the package and install command when ioredis is missing', async () => {
    jest.resetModules();
    jest.doMock('ioredis', () => {
      throw Object.assign(new Error("Cannot find module 'ioredis'"), { code: 'MODULE_NOT_FOUND' });
    });
    const {
      createRedisOutboxStore: create,
    } = require('../../../lib/stores/redis/redis-store.factory');
    const {
      MissingDependencyError: Missing,
    } = require('../../../lib/errors/missing-dependency.error');
    const failure = create({ type: 'redis', url }, { options: {} as ResolvedOutboxOptions });
    await expect(failure).rejects.toBeInstanceOf(Missing);
    await expect(failure).rejects.toThrow('npm install ioredis');
    jest.dontMock('ioredis');
    expect(MissingDependencyError).toBeDefined();
  });
});

function connectLazy(): Redis {
  return new Redis({ lazyConnect: true });
}
