import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { describeWithService } from '../../support/services';
import { uniquePrefix } from '../../stores/typeorm/typeorm-test-helpers';
import { ExecutorClient, ExecutorClientName, openExecutorClient } from './executor-clients';

/**
 * `SqlExecutor.clientTransaction`: `fn` gets the client's own transaction object (what `@Inbox()`
 * hands a consumer) and a connection in that same transaction; `ownsClient` recognises the object
 * the executor was made from.
 */
const CLIENTS: ExecutorClientName[] = ['node-postgres', 'Drizzle', 'Kysely', 'TypeORM'];

class Boom extends Error {}

describeWithService('postgres', 'SqlExecutor.clientTransaction', () => {
  describe.each(CLIENTS)('%s', (name) => {
    const table = `${uniquePrefix('ixct')}rows`;
    let c: ExecutorClient;

    beforeAll(async () => {
      c = await openExecutorClient(name);
      await c.query(`CREATE TABLE ${table} (id text PRIMARY KEY)`);
    });

    afterAll(async () => {
      await c?.query(`DROP TABLE IF EXISTS ${table}`);
      await c?.close();
    });

    const ids = async () =>
      (await c.query(`SELECT id FROM ${table} ORDER BY id`)).map((r) => r.id as string);

    it("commits the app's write through tx and the store's through the connection together", async () => {
      const result = await c.executor.clientTransaction(async (tx, connection) => {
        await c.run(tx, `INSERT INTO ${table} (id) VALUES ('app-1')`);
        await connection.query({
          text: `INSERT INTO ${table} (id) VALUES ($1)`,
          params: ['store-1'],
        });
        // Both in one transaction: the app sees the store's uncommitted row through tx.
        return (await c.run(tx, `SELECT count(*)::int AS n FROM ${table}`))[0].n;
      });
      expect(result).toBe(2);
      expect(await ids()).toEqual(['app-1', 'store-1']);
    });

    it('rolls both back and rethrows when fn throws', async () => {
      const error = await c.executor
        .clientTransaction(async (tx, connection) => {
          await c.run(tx, `INSERT INTO ${table} (id) VALUES ('app-2')`);
          await connection.query({
            text: `INSERT INTO ${table} (id) VALUES ($1)`,
            params: ['store-2'],
          });
          throw new Boom('after the writes');
        })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Boom);
      expect(await ids()).not.toContain('app-2');
      expect(await ids()).not.toContain('store-2');
    });

    it('hands a tx that transactionOf accepts, on the same transaction', async () => {
      await c.executor.clientTransaction(async (tx) => {
        const caller = await c.executor.transactionOf(tx);
        await caller.connection.query({
          text: `INSERT INTO ${table} (id) VALUES ($1)`,
          params: ['via-of'],
        });
        const seen = await c.run(tx, `SELECT id FROM ${table} WHERE id = 'via-of'`);
        expect(seen).toHaveLength(1);
      });
      expect(await ids()).toContain('via-of');
    });

    it.each(['READ COMMITTED', 'REPEATABLE READ', 'SERIALIZABLE'] as const)(
      'opens the transaction at %s',
      async (isolation) => {
        const seen = await c.executor.clientTransaction(
          async (tx, connection) => ({
            app: (await c.run(tx, 'SHOW transaction_isolation'))[0].transaction_isolation,
            store: (await connection.query({ text: 'SHOW transaction_isolation', params: [] }))
              .rows[0].transaction_isolation,
          }),
          { isolation },
        );
        expect(seen).toEqual({ app: isolation.toLowerCase(), store: isolation.toLowerCase() });
      },
    );

    it('transaction() applies the isolation asked for too', async () => {
      const seen = await c.executor.transaction(
        async (connection) =>
          (await connection.query({ text: 'SHOW transaction_isolation', params: [] })).rows[0]
            .transaction_isolation,
        { isolation: 'SERIALIZABLE' },
      );
      expect(seen).toBe('serializable');
    });

    it('ownsClient: the object the executor was made from, not another client', async () => {
      expect(c.executor.ownsClient(c.client)).toBe(true);
      expect(c.executor.ownsClient({})).toBe(false);
      expect(c.executor.ownsClient(undefined)).toBe(false);
      const other = await openExecutorClient(name, 1);
      try {
        expect(c.executor.ownsClient(other.client)).toBe(false);
      } finally {
        await other.close();
      }
    });
  });
});
