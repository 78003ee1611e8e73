import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import { HandlerSubscription } from '../../../lib/interfaces/outbox-store.interface';
import { describeWithService } from '../../support/services';
import {
  openDataSource,
  SERVICE_OF,
  storeFor,
  TestDialect,
  uniquePrefix,
} from './typeorm-test-helpers';

const A: HandlerSubscription = { name: 'A.handle', types: ['pool.event'] };

/**
 * With a single pooled connection, a handler that queries (and even appends in its own
 * transaction) between claim and ack must not wait on a connection the store still holds.
 */
function poolOfOneOn(dialect: Exclude<TestDialect, 'sqlite'>): void {
  let dataSource: DataSource;
  let tables: Awaited<ReturnType<typeof storeFor>>;
  beforeAll(async () => {
    dataSource = await openDataSource(
      dialect,
      dialect === 'postgres' ? { max: 1 } : { connectionLimit: 1 },
    );
    tables = await storeFor(dataSource, uniquePrefix(`po${dialect.slice(0, 2)}`));
  });
  afterAll(async () => {
    await tables?.drop();
    await dataSource?.destroy();
  });

  it('runs handlers that use the same pool between claim and ack', async () => {
    const { store } = tables;
    const ids = Array.from({ length: 20 }, () => randomUUID());
    await store.append(
      ids.map((id, i) => ({
        id,
        type: 'pool.event',
        payload: { i },
        key: i % 2 ? 'k' : null,
        headers: {},
        occurredAt: new Date(),
        availableAt: null,
        handlers: ['A.handle'],
      })),
    );
    const handled: string[] = [];
    const started = Date.now();
    while (handled.length < ids.length && Date.now() - started < 10_000) {
      const claimed = await store.claim({
        workerId: 'w',
        handlers: [A],
        limit: 5,
        leaseMs: 10_000,
      });
      await Promise.all(
        claimed.map(async (c) => {
          // The "handler": a read, a renewal and a transactional append through the one connection.
          await dataSource.query('SELECT 1');
          const lease = await store.renew(c.lease, 10_000);
          await dataSource.transaction(async (manager) => {
            await store.append(
              [
                {
                  id: randomUUID(),
                  type: 'pool.followup',
                  payload: { after: c.event.id },
                  key: null,
                  headers: {},
                  occurredAt: new Date(),
                  availableAt: null,
                  handlers: [],
                },
              ],
              { manager },
            );
          });
          await store.ack(lease);
          handled.push(c.event.id);
        }),
      );
    }
    expect(handled.sort()).toEqual([...ids].sort());
    expect((await store.stats()).byType['pool.followup']?.pending).toBe(ids.length);
  }, 20_000);
}

describeWithService(SERVICE_OF.postgres, 'typeorm pool of one', () => poolOfOneOn('postgres'));
describeWithService(SERVICE_OF.mariadb, 'typeorm pool of one', () => poolOfOneOn('mariadb'));
