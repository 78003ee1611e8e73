import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, expect, it, jest } from '@jest/globals';
import { DataSource } from 'typeorm';
import { HandlerSubscription } from '../../../lib/interfaces/outbox-store.interface';
import { TypeOrmOutboxStore } from '../../../lib/stores/typeorm/internal';
import { openDataSource, storeFor, uniquePrefix } from './typeorm-test-helpers';

const A: HandlerSubscription = { name: 'A.handle', types: ['t.one'] };

/**
 * Guarantee 5 (store clock) across processes: the expansion probe's quiet period is an
 * app-clock throttle, so an app clock that steps back must not stretch it. Two store instances
 * on one database stand for an API process (appends without handlers) and a worker.
 */
let ds: DataSource;
let h: Awaited<ReturnType<typeof storeFor>>;

beforeEach(async () => {
  ds = await openDataSource('sqlite');
  h = await storeFor(ds, uniquePrefix('clk'));
});
afterEach(async () => {
  jest.useRealTimers();
  await h.drop();
  await ds.destroy();
});

it('expands an event another process appended after the app clock stepped back 3 h', async () => {
  const worker = h.store;
  const api = new TypeOrmOutboxStore(ds, { tablePrefix: h.tables.prefix });
  const claim = () => worker.claim({ workerId: 'w', handlers: [A], limit: 10, leaseMs: 60_000 });
  expect(await claim()).toHaveLength(0); // an empty expansion probe starts the quiet period
  // Only Date moves; timers stay real.
  jest.useFakeTimers({
    now: Date.now() - 3 * 3_600_000,
    advanceTimers: true,
    doNotFake: [
      'hrtime',
      'nextTick',
      'performance',
      'queueMicrotask',
      'setImmediate',
      'clearImmediate',
      'setInterval',
      'clearInterval',
      'setTimeout',
      'clearTimeout',
    ],
  });
  await api.append([
    {
      id: randomUUID(),
      type: 't.one',
      payload: {},
      key: null,
      headers: {},
      occurredAt: new Date(),
      availableAt: null,
      handlers: [],
    },
  ]);
  // Past the 1 s quiet period in real time.
  await new Promise((resolve) => setTimeout(resolve, 1_200));
  expect(await claim()).toHaveLength(1);
});
