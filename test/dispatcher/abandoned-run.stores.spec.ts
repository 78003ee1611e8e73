import { Injectable } from '@nestjs/common';
import { MemoryOutboxStore, OutboxEvent, OutboxHandler, OutboxStore } from 'nestjs-outbox';
import { RedisOutboxStore } from '../../lib/stores/redis/redis-outbox.store';
import { createOutboxApp, TestApp } from '../support/outbox-app';
import { describeWithService } from '../support/services';
import {
  connect,
  dropPrefix,
  uniquePrefix as redisPrefix,
} from '../stores/redis/redis-test-support';
import {
  openDataSource,
  SERVICE_OF,
  storeFor,
  TestDialect,
  uniquePrefix,
} from '../stores/typeorm/typeorm-test-helpers';

/** Waits (real time) until `check` holds; false when `ms` passed first. */
async function eventually(check: () => Promise<boolean> | boolean, ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return check();
}

interface StoreTarget {
  open(): Promise<{ store: OutboxStore; close(): Promise<void> }>;
}

const sql = (dialect: TestDialect): StoreTarget => ({
  async open() {
    const dataSource = await openDataSource(dialect);
    const tables = await storeFor(dataSource, uniquePrefix(`ab${dialect.slice(0, 2)}`));
    return {
      store: tables.store,
      async close() {
        await tables.drop();
        await dataSource.destroy();
      },
    };
  },
});

/**
 * docs/handlers.md (Retries) and Guarantees 8: a handler that outlives its
 * timeout and ignores its aborted signal does not hold its key forever. Each later claim of the
 * delivery while that run still executes is a failed attempt, so it ends as a dead letter
 * (`exhausted`) after `maxAttempts`, the key's next event runs and no lease stays held.
 */
function abandonedRunOn(target: StoreTarget): void {
  let opened: Awaited<ReturnType<StoreTarget['open']>>;
  let t: TestApp | undefined;
  beforeAll(async () => {
    opened = await target.open();
  });
  afterAll(async () => {
    await t?.app.close();
    await opened?.close();
  });

  it('a timed-out handler that never settles is dead-lettered (exhausted) and frees its key', async () => {
    const started: number[] = [];
    @Injectable()
    class Stuck {
      @OutboxHandler('acct.changed', { name: 'stuck', timeoutMs: 100, maxAttempts: 3 })
      handle(event: OutboxEvent<{ n: number }>) {
        started.push(event.payload.n);
        // Ignores its signal and never settles.
        if (event.payload.n === 1) return new Promise(() => undefined);
      }
    }
    t = await createOutboxApp([Stuck], {
      store: opened.store,
      dispatcher: { pollInterval: 20, leaseMs: 1_000, backoff: { initialMs: 50, jitter: 0 } },
    });
    const [first, second] = await t.outbox.append([
      { type: 'acct.changed', payload: { n: 1 }, key: 'acct-1' },
      { type: 'acct.changed', payload: { n: 2 }, key: 'acct-1' },
    ]);
    expect(await eventually(() => started.includes(2), 8_000)).toBe(true);
    // The stuck handler was started once: later attempts never start beside it on this worker.
    expect(started).toEqual([1, 2]);
    const { items } = await opened.store.listDeadLetters({ limit: 10 });
    expect(items).toHaveLength(1);
    expect(items[0]).toMatchObject({ eventId: first.id, reason: 'exhausted', attempts: 3 });
    expect(items[0].errors.map((e) => e.name)).toEqual([
      'HandlerTimeoutError',
      'AbandonedRunError',
      'AbandonedRunError',
    ]);
    expect(items[0].errors[2].message).toMatch(/still running/);
    expect(
      await eventually(async () => {
        const stats = await opened.store.stats();
        return stats.leased === 0 && stats.pending === 0;
      }, 5_000),
    ).toBe(true);
    expect(second.id).toBeDefined();
    expect(t.dispatcher.stats()).toMatchObject({ abandoned: 1, deadLettered: 1, succeeded: 1 });
  }, 20_000);
}

describe('a handler that ignores its abort signal [memory]', () =>
  abandonedRunOn({
    async open() {
      return { store: new MemoryOutboxStore(), close: async () => undefined };
    },
  }));

describe('a handler that ignores its abort signal [sqlite]', () => abandonedRunOn(sql('sqlite')));

for (const dialect of ['postgres', 'mariadb'] as const) {
  describeWithService(SERVICE_OF[dialect], 'a handler that ignores its abort signal', () =>
    abandonedRunOn(sql(dialect)),
  );
}

describeWithService('redis', 'a handler that ignores its abort signal', () =>
  abandonedRunOn({
    async open() {
      const prefix = redisPrefix('ab');
      const client = connect();
      return {
        store: new RedisOutboxStore({ client, prefix }),
        async close() {
          await dropPrefix(client, prefix);
          client.disconnect();
        },
      };
    },
  }),
);
