import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { AppendableEvent } from 'nestjs-outbox';
import { TypeOrmOutboxStore } from '../../../lib/stores/typeorm/internal';
import { openDataSource, storeFor, uniquePrefix } from './typeorm-test-helpers';

/**
 * Claims skip the probe for unexpanded deliveries for a second after one came back empty. A
 * placeholder written by another process is then expanded a little later, and per-key order
 * holds in the meantime.
 */
describe('typeorm: expansion probe throttle (sqlite)', () => {
  let ds: DataSource;
  let h: Awaited<ReturnType<typeof storeFor>>;
  const prefix = uniquePrefix('thr');
  const H = { name: 'H', types: ['t.x'] };

  const event = (key: string, handlers: string[]): AppendableEvent => ({
    id: randomUUID(),
    type: 't.x',
    payload: {},
    key,
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers,
  });

  beforeAll(async () => {
    ds = await openDataSource('sqlite');
    h = await storeFor(ds, prefix);
  });
  afterAll(async () => {
    await h.drop();
    await ds.destroy();
  });

  it('expands another process’s placeholder after the quiet second, holding its key meanwhile', async () => {
    const claimer = h.store;
    const otherProcess = new TypeOrmOutboxStore(ds, { tablePrefix: prefix });
    expect(
      await claimer.claim({ workerId: 'w', handlers: [H], limit: 10, leaseMs: 30_000 }),
    ).toEqual([]);
    const e1 = event('k', []);
    await otherProcess.append([e1]);
    const e2 = event('k', ['H']);
    await claimer.append([e2]);
    // Inside the quiet second: E1 is not expanded yet, and E2 must wait for it.
    expect(
      await claimer.claim({ workerId: 'w', handlers: [H], limit: 10, leaseMs: 30_000 }),
    ).toEqual([]);
    await new Promise((r) => setTimeout(r, 1_100));
    const first = await claimer.claim({ workerId: 'w', handlers: [H], limit: 10, leaseMs: 30_000 });
    expect(first.map((c) => c.event.id)).toEqual([e1.id]);
    await claimer.ack(first[0].lease);
    const second = await claimer.claim({
      workerId: 'w',
      handlers: [H],
      limit: 10,
      leaseMs: 30_000,
    });
    expect(second.map((c) => c.event.id)).toEqual([e2.id]);
  });

  it('looks at once for a placeholder this process wrote itself', async () => {
    const store = h.store;
    await h.empty();
    expect(await store.claim({ workerId: 'w', handlers: [H], limit: 10, leaseMs: 30_000 })).toEqual(
      [],
    );
    const e = event('solo', []);
    await store.append([e]);
    const claimed = await store.claim({ workerId: 'w', handlers: [H], limit: 10, leaseMs: 30_000 });
    expect(claimed.map((c) => c.event.id)).toEqual([e.id]);
  });
});
