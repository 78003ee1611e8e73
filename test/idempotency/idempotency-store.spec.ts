import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import {
  IdempotencyInProgressError,
  IdempotencyStore,
  MemoryIdempotencyStore,
  RedisIdempotencyStore,
  runIdempotent,
} from 'nestjs-outbox';
import { describeWithService, SERVICES } from '../support/services';

interface Ctx {
  store: IdempotencyStore;
  /** Lets TTLs pass: moves the memory clock, sleeps for Redis. */
  advance: (ms: number) => Promise<void>;
  teardown?: () => Promise<void>;
}

const TTL = 150;

function describeIdempotencyStore(name: string, factory: () => Promise<Ctx>): void {
  describe(`IdempotencyStore: ${name}`, () => {
    let ctx: Ctx;
    let store: IdempotencyStore;
    beforeEach(async () => {
      ctx = await factory();
      store = ctx.store;
    });
    afterEach(async () => ctx.teardown?.());

    it('lets one claim in and answers in-progress to the others', async () => {
      const results = await Promise.all(
        Array.from({ length: 10 }, () => store.claim('s', 'k1', 60_000)),
      );
      expect(results.filter((r) => r.status === 'acquired')).toHaveLength(1);
      expect(results.filter((r) => r.status === 'in-progress')).toHaveLength(9);
      expect(await store.isDone('s', 'k1')).toBe(false);
    });

    it('answers done after markDone until the done TTL passes', async () => {
      const c = await store.claim('s', 'k2', 60_000);
      expect(c.status).toBe('acquired');
      await store.markDone('s', 'k2', TTL);
      expect(await store.claim('s', 'k2', 60_000)).toEqual({ status: 'done' });
      expect(await store.isDone('s', 'k2')).toBe(true);
      await ctx.advance(TTL + 100);
      expect(await store.isDone('s', 'k2')).toBe(false);
      expect((await store.claim('s', 'k2', 60_000)).status).toBe('acquired');
    });

    it('expires an abandoned processing claim', async () => {
      expect((await store.claim('s', 'k3', TTL)).status).toBe('acquired');
      expect((await store.claim('s', 'k3', TTL)).status).toBe('in-progress');
      await ctx.advance(TTL + 100);
      expect((await store.claim('s', 'k3', TTL)).status).toBe('acquired');
    });

    it('releases only the matching claim and never a done mark', async () => {
      const first = await store.claim('s', 'k4', 60_000);
      if (first.status !== 'acquired') throw new Error('expected acquired');
      expect(await store.release('s', 'k4', 'someone-else')).toBe(false);
      expect((await store.claim('s', 'k4', 60_000)).status).toBe('in-progress');
      expect(await store.release('s', 'k4', first.token)).toBe(true);
      expect((await store.claim('s', 'k4', 60_000)).status).toBe('acquired');
      await store.markDone('s', 'k4', 60_000);
      expect(await store.release('s', 'k4')).toBe(false);
      expect(await store.isDone('s', 'k4')).toBe(true);
    });

    it('keeps scopes apart, even when scope and key contain separators', async () => {
      await store.markDone('a:b', 'c', 60_000);
      expect(await store.isDone('a', 'b:c')).toBe(false);
      expect(await store.isDone('a:b', 'c')).toBe(true);
    });

    describe('runIdempotent', () => {
      const opts = { processingTtlMs: 60_000, doneTtlMs: 60_000 };

      it('runs once and skips duplicates', async () => {
        let runs = 0;
        const first = await runIdempotent(store, 'h', 'm1', opts, async () => ++runs);
        expect(first).toEqual({ status: 'ran', result: 1, recorded: true });
        expect(await runIdempotent(store, 'h', 'm1', opts, async () => ++runs)).toEqual({
          status: 'skipped',
        });
        expect(runs).toBe(1);
      });

      it('releases the key when fn fails so a retry runs it', async () => {
        await expect(
          runIdempotent(store, 'h', 'm2', opts, async () => {
            throw new Error('down');
          }),
        ).rejects.toThrow('down');
        const again = await runIdempotent(store, 'h', 'm2', opts, async () => 'ok');
        expect(again).toMatchObject({ status: 'ran', result: 'ok' });
      });

      it('refuses a concurrent duplicate with IdempotencyInProgressError', async () => {
        let release!: () => void;
        const gate = new Promise<void>((resolve) => (release = resolve));
        const slow = runIdempotent(store, 'h', 'm3', opts, () => gate.then(() => 'first'));
        await new Promise((r) => setTimeout(r, 20));
        await expect(
          runIdempotent(store, 'h', 'm3', opts, async () => 'second'),
        ).rejects.toBeInstanceOf(IdempotencyInProgressError);
        release();
        expect(await slow).toMatchObject({ status: 'ran', result: 'first' });
      });
    });
  });
}

describeIdempotencyStore('memory', async () => {
  let now = Date.parse('2026-06-01T00:00:00.000Z');
  return {
    store: new MemoryIdempotencyStore({ clock: () => new Date(now) }),
    advance: async (ms) => {
      now += ms;
    },
  };
});

describeWithService('redis', 'RedisIdempotencyStore', () => {
  describeIdempotencyStore('redis', async () => {
    const client = new Redis({ host: SERVICES.redis.host, port: SERVICES.redis.port });
    const prefix = `test-idem-${randomUUID().slice(0, 8)}`;
    return {
      store: new RedisIdempotencyStore({ client, prefix }),
      // Redis expires keys by its own clock; PX has no injectable time.
      advance: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
      teardown: async () => {
        const keys = await client.keys(`${prefix}:*`);
        if (keys.length) await client.del(...keys);
        await client.quit();
      },
    };
  });

  it('writes keys with a TTL under the prefix', async () => {
    const client = new Redis({ host: SERVICES.redis.host, port: SERVICES.redis.port });
    const prefix = `test-idem-${randomUUID().slice(0, 8)}`;
    const store = new RedisIdempotencyStore({ client, prefix });
    await store.claim('orders', '42', 5_000);
    const [key] = await client.keys(`${prefix}:*`);
    expect(key).toBe(`${prefix}:6:orders:42`);
    expect(await client.pttl(key)).toBeGreaterThan(0);
    await store.markDone('orders', '42', 60_000);
    expect(await client.pttl(key)).toBeGreaterThan(5_000);
    await client.del(key);
    await client.quit();
  });
});

describe('runIdempotent when the done mark cannot be written', () => {
  it('reports the effect as ran but not recorded instead of failing the delivery', async () => {
    const inner = new MemoryIdempotencyStore();
    const broken: IdempotencyStore = {
      claim: (s, k, ttl) => inner.claim(s, k, ttl),
      markDone: async () => {
        throw new Error('redis down');
      },
      release: (s, k, t) => inner.release(s, k, t),
      isDone: (s, k) => inner.isDone(s, k),
    };
    const outcome = await runIdempotent(
      broken,
      'h',
      'm',
      { processingTtlMs: 1000, doneTtlMs: 1000 },
      () => 7,
    );
    expect(outcome).toMatchObject({ status: 'ran', result: 7, recorded: false });
  });
});
