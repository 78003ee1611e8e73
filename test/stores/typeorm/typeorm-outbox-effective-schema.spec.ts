import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { TypeOrmOutboxStore } from '../../../lib/stores/typeorm/internal';
import { createDialect } from '../../../lib/stores/typeorm/dialects';
import { describeWithService } from '../../support/services';
import { eventually } from '../../dispatcher/wake-test-helpers';
import { openDataSource, storeFor, uniquePrefix } from './typeorm-test-helpers';

/** `?` placeholders as PostgreSQL's `$n`. */
function numbered(text: string): string {
  let i = 0;
  return text.replace(/\?/g, () => `$${++i}`);
}

/**
 * Two processes on the same PostgreSQL tables, one configured with `schema: 'public'` and one
 * with no schema (the tables are in `current_schema()`, which is `public`): the names they derive
 * from the schema — the wake-up channel and the advisory lock keys — follow the schema the tables
 * are really in, so they wake each other and their `ensureSchema` / cleanup take turns.
 */
describeWithService('postgres', 'typeorm: the effective PostgreSQL schema', () => {
  let ds: DataSource;
  let other: DataSource;
  let tables: Awaited<ReturnType<typeof storeFor>>;
  const prefix = uniquePrefix('effs');
  beforeAll(async () => {
    ds = await openDataSource('postgres');
    other = await openDataSource('postgres');
    tables = await storeFor(ds, prefix);
  });
  afterAll(async () => {
    await tables?.drop();
    await ds?.destroy();
    await other?.destroy();
  });

  it('a store with schema "public" and one with none share the wake-up channel', async () => {
    const explicit = new TypeOrmOutboxStore(ds, { tablePrefix: prefix, schema: 'public' });
    const implicit = new TypeOrmOutboxStore(other, { tablePrefix: prefix });
    await Promise.all([explicit.init(), implicit.init()]);
    expect(implicit.wakeupChannel).not.toBeNull();
    expect(implicit.wakeupChannel).toBe(explicit.wakeupChannel);
  });

  it('wakes a listener configured without a schema when the producer names "public"', async () => {
    const producer = new TypeOrmOutboxStore(ds, { tablePrefix: prefix, schema: 'public' });
    const listener = new TypeOrmOutboxStore(other, { tablePrefix: prefix });
    let wakes = 0;
    const stop = listener.onWakeup(() => wakes++);
    try {
      // Connected (one call), then past its second look after connecting (docs/wakeups.md).
      expect(await eventually(() => wakes >= 1, 5_000)).toBe(true);
      await new Promise((r) => setTimeout(r, 1_300));
      const before = wakes;
      producer.publishWakeups();
      await producer.append([
        {
          id: randomUUID(),
          type: 't.effs',
          payload: {},
          key: null,
          headers: {},
          occurredAt: new Date(),
          availableAt: null,
          handlers: ['H'],
        },
      ]);
      expect(await eventually(() => wakes > before, 5_000)).toBe(true);
    } finally {
      await stop();
      await producer.close();
      await listener.close();
    }
  });

  it('takes the same advisory locks (schema creation, cleanup) with schema "public" and without', async () => {
    const explicit = createDialect(ds, { tablePrefix: prefix, schema: 'public' });
    const implicit = createDialect(other, { tablePrefix: prefix });
    for (const purpose of ['schema', 'cleanup']) {
      const holder = ds.createQueryRunner();
      const contender = other.createQueryRunner();
      try {
        await holder.startTransaction();
        const name = (d: typeof explicit) => `${d.tables.lockName}:${purpose}`;
        const held = explicit.tryLock(name(explicit));
        const [mine] = await holder.query(numbered(held.text), held.params);
        expect(mine.ok).toBe(true);
        const wanted = implicit.tryLock(name(implicit));
        const [theirs] = await contender.query(numbered(wanted.text), wanted.params);
        expect(theirs.ok).toBe(false);
      } finally {
        await holder.rollbackTransaction().catch(() => undefined);
        await holder.release();
        await contender.release();
      }
    }
  });
});
