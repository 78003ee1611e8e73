import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { DataSource, Logger } from 'typeorm';
import {
  AppendableEvent,
  HandlerSubscription,
} from '../../../lib/interfaces/outbox-store.interface';
import { describeWithService } from '../../support/services';
import {
  claimInTransaction,
  dataSourceOptions,
  SERVICE_OF,
  storeFor,
  uniquePrefix,
} from './typeorm-test-helpers';

const H: HandlerSubscription = { name: 'H', types: ['rt.event'] };

function event(n: number, key: string | null): AppendableEvent {
  return {
    id: randomUUID(),
    type: 'rt.event',
    payload: { n },
    key,
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers: [H.name],
  };
}

/**
 * Statements sent per hot operation, counted by a TypeORM logger (every statement a query runner
 * sends, BEGIN / COMMIT / SET included). The hot path's cost follows its round trips: on
 * PostgreSQL the claim and the ack of a batch are one statement each; on MariaDB the ack is at
 * most two and the claim three (window, `SET TRANSACTION ISOLATION LEVEL READ COMMITTED` for the
 * next statement only, the claim statement — see docs/design.md).
 */
function roundTripsOn(dialect: 'postgres' | 'mariadb', most: { claim: number; ack: number }) {
  const sent: string[] = [];
  const logger: Logger = {
    logQuery: (query) => void sent.push(query),
    logQueryError: () => undefined,
    logQuerySlow: () => undefined,
    logSchemaBuild: () => undefined,
    logMigration: () => undefined,
    log: () => undefined,
  };
  let ds: DataSource;
  let h: Awaited<ReturnType<typeof storeFor>>;

  beforeAll(async () => {
    ds = await new DataSource({ ...dataSourceOptions(dialect), logger }).initialize();
    h = await storeFor(ds, uniquePrefix(`rt${dialect.slice(0, 2)}`));
  });
  afterAll(async () => {
    await h?.drop();
    await ds?.destroy();
  });

  it(`claims a batch in at most ${most.claim} and acks it in at most ${most.ack} statements`, async () => {
    await h.store.append(
      Array.from({ length: 300 }, (_, i) => event(i, i % 3 ? null : `k${i % 7}`)),
    );
    const claim = () =>
      h.store.claim({ workerId: 'w', handlers: [H], limit: 100, leaseMs: 60_000 });
    // The first claim also probes for unexpanded deliveries (then skips the probe for a while).
    await claim();
    for (let round = 0; round < 2; round++) {
      sent.length = 0;
      const batch = await claim();
      expect(batch.length).toBeGreaterThan(0);
      expect(sent.length).toBeLessThanOrEqual(most.claim);
      sent.length = 0;
      const acked = await h.store.ackMany(batch.map((c) => c.lease));
      expect(acked).toHaveLength(batch.length);
      expect(sent.length).toBeLessThanOrEqual(most.ack);
    }
  });

  if (dialect === 'mariadb') {
    it('claims like MySQL 8 (a READ COMMITTED transaction) when told to, as on a server logging statements', async () => {
      const store = claimInTransaction(h.store);
      await store.append(Array.from({ length: 50 }, (_, i) => event(i, null)));
      sent.length = 0;
      const batch = await store.claim({ workerId: 'w', handlers: [H], limit: 20, leaseMs: 60_000 });
      expect(batch).toHaveLength(20);
      expect(sent.some((q) => /START TRANSACTION/i.test(q))).toBe(true);
      expect(sent.some((q) => /ON DUPLICATE KEY UPDATE/i.test(q))).toBe(false);
      await expect(store.ackMany(batch.map((c) => c.lease))).resolves.toHaveLength(20);
    });
  }
}

describeWithService(SERVICE_OF.postgres, 'typeorm round trips', () =>
  roundTripsOn('postgres', { claim: 1, ack: 1 }),
);
describeWithService(SERVICE_OF.mariadb, 'typeorm round trips', () =>
  roundTripsOn('mariadb', { claim: 3, ack: 2 }),
);
