/*
 * The store's dead-letter and inspection calls, used directly (docs/dead-letters.md), answer
 * alike on every store for inputs the admin API would refuse before: a time that is not a valid
 * Date or a limit that is no number is refused with an OutboxValidationError naming it (before:
 * a SQL error on PostgreSQL and MariaDB, a Redis script error, or, on memory and SQLite, a
 * replayed dead letter due at an invalid time), and a text criterion holding a NUL matches
 * nothing (before: a SQL error on PostgreSQL only).
 */
import { randomUUID } from 'node:crypto';
import { OutboxStore, OutboxValidationError } from 'nestjs-outbox';
import { describeOnStores, OpenedStore } from '../support/store-targets';

const INVALID = new Date(Number.NaN);

describeOnStores('dead-letter calls with invalid times, limits and NULs', 'dledge', (target) => {
  let opened: OpenedStore;
  let store: OutboxStore;
  let deadId: string;

  beforeAll(async () => {
    opened = await target.open();
    store = opened.store;
    await store.append([
      {
        id: randomUUID(),
        type: 'edge.event',
        key: 'k1',
        payload: { v: 1 },
        headers: {},
        occurredAt: new Date(),
        availableAt: null,
        handlers: ['Edge.handle'],
      },
    ]);
    const [claimed] = await store.claim({
      workerId: 'w1',
      handlers: [{ name: 'Edge.handle', types: ['edge.event'] }],
      limit: 1,
      leaseMs: 30_000,
    });
    await store.deadLetter(claimed.lease, 'rejected', {
      name: 'Error',
      message: 'no',
      attempt: 1,
      workerId: 'w1',
    });
    deadId = claimed.id;
  });
  afterAll(() => opened?.close());

  const refused = async (call: () => Promise<unknown>, field: string) => {
    const error = await call().then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).field).toBe(field);
  };

  it('refuses an invalid Date, naming it, and changes nothing', async () => {
    await refused(() => store.replay({ ids: [deadId] }, INVALID), 'availableAt');
    await refused(() => store.replay({ filter: { failedBefore: INVALID } }), 'filter.failedBefore');
    await refused(() => store.purge({ filter: { failedAfter: INVALID } }), 'filter.failedAfter');
    await refused(() => store.listDeadLetters({ limit: 10, failedAfter: INVALID }), 'failedAfter');
    await refused(() => store.summarizeDeadLetters({ failedBefore: INVALID }), 'failedBefore');
    const still = await store.getDeadLetter(deadId);
    expect(still).toMatchObject({ id: deadId, reason: 'rejected' });
  });

  it('refuses a limit that is no number; reads any number as a page size', async () => {
    await refused(() => store.listDeadLetters({ limit: Number.NaN }), 'limit');
    await refused(() => store.listDeadLetters({ limit: '5' as unknown as number }), 'limit');
    await refused(() => store.listDeliveries!({ state: 'retrying', limit: Number.NaN }), 'limit');
    await refused(() => store.listEventsByKey!({ key: 'k1', limit: Number.NaN }), 'limit');
    for (const limit of [1e21, Number.POSITIVE_INFINITY, 0.5, -1]) {
      const page = await store.listDeadLetters({ limit });
      expect(page.items.map((d) => d.id)).toEqual([deadId]);
      const events = await store.listEventsByKey!({ key: 'k1', limit });
      expect(events.items).toHaveLength(1);
    }
  });

  it('a text criterion holding a NUL matches nothing', async () => {
    expect((await store.listDeadLetters({ limit: 10, key: 'k1\u0000' })).items).toEqual([]);
    expect(await store.summarizeDeadLetters({ type: 'edge.event\u0000' })).toEqual([]);
    expect(await store.replay({ filter: { handler: 'Edge.handle\u0000' } })).toBe(0);
    expect(await store.purge({ filter: { key: '\u0000' } })).toBe(0);
    const deliveries = await store.listDeliveries!({
      state: 'retrying',
      type: 'a\u0000',
      limit: 10,
    });
    expect(deliveries.items).toEqual([]);
    expect((await store.listEventsByKey!({ key: 'k1\u0000', limit: 10 })).items).toEqual([]);
    expect(await store.getDeadLetter(deadId)).not.toBeNull();
  });
});
