import { DataSource } from 'typeorm';
import { ensureInboxSchema, ensureOutboxSchema } from 'nestjs-outbox';
import { createDialect } from '../../../lib/stores/typeorm/dialects';
import { describeWithService } from '../../support/services';
import { dataSourceOptions, uniquePrefix } from './typeorm-test-helpers';

/**
 * A replica starting (ensureSchema) while another one is inside a transaction that wrote the
 * outbox and inbox tables: `CREATE INDEX IF NOT EXISTS` takes a lock before it checks, so it
 * used to wait behind that transaction (and every writer queued behind it). Current tables now
 * cost reads only.
 */
describeWithService('postgres', 'ensureSchema beside open writing transactions', () => {
  let ds: DataSource;
  const prefix = uniquePrefix('bes');
  beforeAll(async () => {
    ds = await new DataSource(dataSourceOptions('postgres')).initialize();
    await ensureOutboxSchema(ds, { tablePrefix: prefix });
    await ensureInboxSchema(ds, { tablePrefix: prefix });
  });
  afterAll(async () => {
    const d = createDialect(ds, { tablePrefix: prefix });
    for (const ddl of d.dropSchema()) await ds.query(ddl);
    await ds.query(`DROP TABLE IF EXISTS "${prefix}inbox"`);
    await ds.destroy();
  });

  it('does not wait for a transaction holding write locks on the tables', async () => {
    const d = createDialect(ds, { tablePrefix: prefix });
    const writer = ds.createQueryRunner();
    await writer.startTransaction();
    try {
      // What an append and an @Inbox() handler hold until they commit.
      await writer.query(`LOCK TABLE ${d.tables.events.text} IN ROW EXCLUSIVE MODE`);
      await writer.query(`LOCK TABLE ${d.tables.deliveries.text} IN ROW EXCLUSIVE MODE`);
      await writer.query(`LOCK TABLE "${prefix}inbox" IN ROW EXCLUSIVE MODE`);
      const started = Date.now();
      const within = async <T>(p: Promise<T>) => {
        let timer: NodeJS.Timeout | undefined;
        try {
          return await Promise.race([
            p,
            new Promise<never>((_, reject) => {
              timer = setTimeout(
                () => reject(new Error('ensureSchema waited on the open transaction')),
                5_000,
              );
            }),
          ]);
        } finally {
          clearTimeout(timer);
        }
      };
      await within(ensureOutboxSchema(ds, { tablePrefix: prefix }));
      await within(ensureInboxSchema(ds, { tablePrefix: prefix }));
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      await writer.rollbackTransaction();
      await writer.release();
    }
  }, 30_000);
});
