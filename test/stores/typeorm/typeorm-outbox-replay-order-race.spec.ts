import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import { HandlerSubscription, Lease } from '../../../lib/interfaces/outbox-store.interface';
import { TypeOrmOutboxStore } from '../../../lib/stores/typeorm/internal';
import { describeWithService } from '../../support/services';
import {
  claimInTransaction,
  openDataSource,
  SERVICE_OF,
  storeFor,
  uniquePrefix,
} from './typeorm-test-helpers';

const H: HandlerSubscription = { name: 'H.handle', types: ['order.race'] };
const ERROR = { name: 'Error', message: 'failed', attempt: 1, workerId: 'w0' };

/**
 * Issue 25, defect 6: never two leased deliveries of one (handler, key). A replayed dead letter A
 * waits while a later delivery B of its key runs. On PostgreSQL and MariaDB a claim that leased B
 * may not have committed yet when the replay commits: a claim that starts then sees A back and B
 * still pending. It must not lease A while B is being leased (its row is locked by that claim).
 * The claim in progress is held open here: a transaction of the test leases B and commits only
 * after the other claim ran.
 */
for (const dialect of ['postgres', 'mariadb', 'mariadb (MySQL path)'] as const) {
  const server = dialect === 'postgres' ? 'postgres' : 'mariadb';
  describeWithService(
    SERVICE_OF[server],
    `typeorm ${dialect}: replay during a claim of its key`,
    () => {
      let ds: DataSource;
      let h: Awaited<ReturnType<typeof storeFor>>;
      let stores: TypeOrmOutboxStore[];
      const D = () => h.tables.deliveries.text;
      const plusMinute =
        server === 'postgres'
          ? "now() + interval '60 seconds'"
          : 'UTC_TIMESTAMP(3) + INTERVAL 60 SECOND';
      const p = (i: number) => (server === 'postgres' ? `$${i}` : '?');

      beforeAll(async () => {
        ds = await openDataSource(server);
        h = await storeFor(ds, uniquePrefix(`ror${server.slice(0, 2)}`));
        stores = [0, 1].map(() => {
          const s = new TypeOrmOutboxStore(ds, { tablePrefix: h.tables.prefix });
          return dialect === 'mariadb (MySQL path)' ? claimInTransaction(s) : s;
        });
      }, 60_000);
      afterAll(async () => {
        await h?.drop();
        await ds?.destroy();
      });
      beforeEach(() => h.empty());

      /** Appends A then B of one key and dead-letters A; returns their delivery ids. */
      async function deadA(key: string): Promise<{ a: string; b: string }> {
        const [store] = stores;
        for (const n of [1, 2]) {
          await store.append([
            {
              id: randomUUID(),
              type: 'order.race',
              key,
              payload: { n },
              headers: {},
              occurredAt: new Date(),
              availableAt: null,
              handlers: [H.name],
            },
          ]);
        }
        const [a] = await store.claim({
          workerId: 'w0',
          handlers: [H],
          limit: 10,
          leaseMs: 60_000,
        });
        expect(a.event.payload).toEqual({ n: 1 });
        await store.deadLetter(a.lease, 'rejected', ERROR);
        const [{ id: b }] = await ds.query(
          `SELECT id FROM ${D()} WHERE event_key = ${p(1)} AND status = 'pending'`,
          [key],
        );
        return { a: a.id, b: String(b) };
      }

      async function liveLeases(key: string): Promise<number> {
        const now = server === 'postgres' ? 'now()' : 'UTC_TIMESTAMP(3)';
        const [row] = await ds.query(
          `SELECT COUNT(*) AS n FROM ${D()} WHERE event_key = ${p(1)} AND status = 'leased' AND lease_until > ${now}`,
          [key],
        );
        return Number(row.n);
      }

      it('leases no replayed dead letter while a claim holds a later delivery of its key', async () => {
        const key = `k-${randomUUID()}`;
        const { a, b } = await deadA(key);
        // Claim 1 has locked and leased B, and not committed yet.
        const claim1 = ds.createQueryRunner();
        await claim1.connect();
        await claim1.startTransaction();
        let open = true;
        try {
          await claim1.query(
            `UPDATE ${D()} SET status = 'leased', attempts = attempts + 1, lease_owner = 'w1', lease_token = 't1', lease_until = ${plusMinute} WHERE id = ${p(1)}`,
            [b],
          );
          // The replay commits meanwhile; claim 2 starts after it.
          expect(await stores[1].replay({ ids: [a] })).toBe(1);
          const claimed = await stores[1].claim({
            workerId: 'w2',
            handlers: [H],
            limit: 10,
            leaseMs: 60_000,
          });
          await claim1.commitTransaction();
          open = false;
          expect(claimed.map((c) => c.id)).toEqual([]);
          expect(await liveLeases(key)).toBe(1);
        } finally {
          if (open) await claim1.rollbackTransaction();
          await claim1.release();
        }
        // B runs; A waits for it, then runs before any later delivery of the key.
        expect(
          await stores[0].claim({ workerId: 'w3', handlers: [H], limit: 10, leaseMs: 60_000 }),
        ).toEqual([]);
        const [row] = await ds.query(`SELECT lease_until FROM ${D()} WHERE id = ${p(1)}`, [b]);
        const lease: Lease = {
          deliveryId: b,
          owner: 'w1',
          token: 't1',
          leaseUntil: new Date(row.lease_until),
        };
        await stores[0].ack(lease);
        const next = await stores[0].claim({
          workerId: 'w3',
          handlers: [H],
          limit: 10,
          leaseMs: 60_000,
        });
        expect(next.map((c) => c.id)).toEqual([a]);
      }, 30_000);

      it('never leases two deliveries of the key when claimers race a replay', async () => {
        // Separate processes: a store of its own DataSource (pool) per claimer.
        const claimers = await Promise.all(
          [0, 1, 2, 3, 4, 5].map(async () => {
            const own = await openDataSource(server);
            const s = new TypeOrmOutboxStore(own, { tablePrefix: h.tables.prefix });
            return {
              ds: own,
              store: dialect === 'mariadb (MySQL path)' ? claimInTransaction(s) : s,
            };
          }),
        );
        try {
          const started = Date.now();
          let rounds = 0;
          let both = 0;
          while (rounds < 150 && Date.now() - started < 40_000) {
            rounds++;
            const key = `k-${rounds}`;
            const { a } = await deadA(key);
            const results = await Promise.all([
              stores[1].replay({ ids: [a] }).then(() => []),
              ...claimers.map(async (c, i) => {
                // Spread the claims over the replay's commit.
                if (i % 2 === 1) await new Promise((resolve) => setImmediate(resolve));
                return c.store.claim({
                  workerId: `c${i}`,
                  handlers: [H],
                  limit: 10,
                  leaseMs: 60_000,
                });
              }),
            ]);
            const leased = results.flat();
            if (leased.length > 1) both++;
            await h.empty();
          }
          expect({ rounds, both }).toEqual({ rounds, both: 0 });
        } finally {
          for (const c of claimers) await c.ds.destroy();
        }
      }, 60_000);
    },
  );
}
