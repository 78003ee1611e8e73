import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import {
  ClaimedDelivery,
  HandlerSubscription,
} from '../../../lib/interfaces/outbox-store.interface';
import { describeWithService } from '../../support/services';
import {
  openDataSource,
  SERVICE_OF,
  storeFor,
  TestDialect,
  uniquePrefix,
} from './typeorm-test-helpers';

const H: HandlerSubscription = { name: 'H', types: ['x'] };

/** Inputs the dispatcher should never send, which the store still must not choke on. */
function robustnessOn(dialect: TestDialect): void {
  let ds: DataSource;
  let h: Awaited<ReturnType<typeof storeFor>>;

  beforeAll(async () => {
    ds = await openDataSource(dialect);
    h = await storeFor(ds, uniquePrefix(`b${dialect.slice(0, 2)}`));
  });
  afterAll(async () => {
    await h?.drop();
    await ds?.destroy();
  });
  beforeEach(() => h.empty());

  async function claimOne(): Promise<ClaimedDelivery> {
    await h.store.append([
      {
        id: randomUUID(),
        type: 'x',
        payload: {},
        key: null,
        headers: {},
        occurredAt: new Date(),
        availableAt: null,
        handlers: [H.name],
      },
    ]);
    const [c] = await h.store.claim({ workerId: 'w', handlers: [H], limit: 1, leaseMs: 30_000 });
    return c;
  }

  it('records error text containing NUL characters, without them', async () => {
    const c = await claimOne();
    const nul = {
      name: 'Bad\u0000Error',
      message: 'bad byte \u0000 in reply',
      workerId: 'w\u0000',
    };
    await h.store.retry(c.lease, 0, { ...nul, attempt: 1 });
    const [again] = await h.store.claim({
      workerId: 'w',
      handlers: [H],
      limit: 1,
      leaseMs: 30_000,
    });
    await h.store.deadLetter(again.lease, 'exhausted', { ...nul, attempt: 2 });
    const dead = await h.store.getDeadLetter(c.id);
    expect(dead?.errors.map((e) => [e.name, e.message, e.workerId, e.attempt])).toEqual([
      ['BadError', 'bad byte  in reply', 'w', 1],
      ['BadError', 'bad byte  in reply', 'w', 2],
    ]);
  });

  for (const delay of [NaN, -5_000, Infinity, -Infinity]) {
    it(`treats a retry delay of ${delay} as no delay`, async () => {
      const c = await claimOne();
      await h.store.retry(c.lease, delay, {
        name: 'Error',
        message: 'e',
        attempt: 1,
        workerId: 'w',
      });
      expect(await h.store.stats()).toMatchObject({ pending: 1, due: 1, leased: 0 });
    });
  }

  it('caps an absurdly long retry delay instead of failing', async () => {
    const c = await claimOne();
    await h.store.retry(c.lease, Number.MAX_SAFE_INTEGER, {
      name: 'Error',
      message: 'e',
      attempt: 1,
      workerId: 'w',
    });
    expect(await h.store.stats()).toMatchObject({ pending: 1, due: 0, leased: 0 });
  });
}

describe('typeorm store robustness on sqlite', () => robustnessOn('sqlite'));
describeWithService(SERVICE_OF.postgres, 'typeorm store robustness', () =>
  robustnessOn('postgres'),
);
describeWithService(SERVICE_OF.mariadb, 'typeorm store robustness', () => robustnessOn('mariadb'));

/** Something cleanup can delete: one delivered event. */
async function deliveredEvent(h: Awaited<ReturnType<typeof storeFor>>): Promise<void> {
  await h.store.append([
    {
      id: randomUUID(),
      type: 'x',
      payload: {},
      key: null,
      headers: {},
      occurredAt: new Date(),
      availableAt: null,
      handlers: [H.name],
    },
  ]);
  const [c] = await h.store.claim({ workerId: 'w', handlers: [H], limit: 1, leaseMs: 30_000 });
  await h.store.ack(c.lease);
  // Retention 0 removes what was delivered strictly before now: let the database clock move on.
  await new Promise((r) => setTimeout(r, 5));
}

const cleanupNow = { deliveredRetentionMs: 0, deadLetterRetentionMs: null, batchSize: 100 };

describeWithService(SERVICE_OF.mariadb, 'typeorm cleanup lock names', () => {
  let ds: DataSource;
  beforeAll(async () => {
    ds = await openDataSource('mariadb');
  });
  afterAll(() => ds?.destroy());

  it('qualify the server-wide GET_LOCK name with the database', async () => {
    const prefix = uniquePrefix('lk');
    const h = await storeFor(ds, prefix);
    const holder = ds.createQueryRunner('master');
    await holder.connect();
    try {
      const [{ db }] = (await holder.query('SELECT DATABASE() AS db')) as Array<{ db: string }>;
      await deliveredEvent(h);
      // The same prefix in another database: its lock must not stop this cleanup.
      await holder.query('SELECT GET_LOCK(?, 0)', [`nestjs-outbox:other_db.${prefix}:cleanup`]);
      await holder.query('SELECT GET_LOCK(?, 0)', [`nestjs-outbox:${prefix}:cleanup`]);
      await holder.query('SELECT GET_LOCK(?, 0)', [`nestjs-outbox:${db}.${prefix}:cleanup`]);
      // This database's lock is held: this round is skipped.
      expect(await h.store.cleanup(cleanupNow)).toEqual({ events: 0, deadLetters: 0 });
      await holder.query('SELECT RELEASE_LOCK(?)', [`nestjs-outbox:${db}.${prefix}:cleanup`]);
      expect(await h.store.cleanup(cleanupNow)).toEqual({ events: 1, deadLetters: 0 });
    } finally {
      await holder.query('SELECT RELEASE_ALL_LOCKS()').catch(() => undefined);
      await holder.release();
      await h.drop();
    }
  });

  it('works with the longest prefix: index names cut to fit, lock name hashed', async () => {
    const prefix = `t_${randomBytes(19).toString('hex')}`;
    expect(prefix).toHaveLength(40);
    const h = await storeFor(ds, prefix);
    try {
      await deliveredEvent(h);
      expect(await h.store.cleanup(cleanupNow)).toEqual({ events: 1, deadLetters: 0 });
      await h.store.ensureSchema();
    } finally {
      await h.drop();
    }
  });
});

describeWithService(SERVICE_OF.postgres, 'typeorm cleanup lock names', () => {
  let ds: DataSource;
  beforeAll(async () => {
    ds = await openDataSource('postgres');
  });
  afterAll(() => ds?.destroy());

  it('key the advisory lock by database and schema as well as the prefix', async () => {
    const prefix = uniquePrefix('lk');
    const h = await storeFor(ds, prefix);
    const holder = ds.createQueryRunner('master');
    await holder.connect();
    const name = `nestjs-outbox:${prefix}:cleanup`;
    try {
      await deliveredEvent(h);
      // The old, prefix-only key (what another schema's outbox with this prefix would share).
      await holder.query('SELECT pg_advisory_lock(hashtext($1))', [name]);
      await holder.query(
        "SELECT pg_advisory_lock(hashtext(current_database() || '.' || 'elsewhere' || ':' || $1))",
        [name],
      );
      const mine =
        "hashtext(current_database() || '.' || coalesce(current_schema(), '') || ':' || $1)";
      await holder.query(`SELECT pg_advisory_lock(${mine})`, [name]);
      expect(await h.store.cleanup(cleanupNow)).toEqual({ events: 0, deadLetters: 0 });
      await holder.query(`SELECT pg_advisory_unlock(${mine})`, [name]);
      expect(await h.store.cleanup(cleanupNow)).toEqual({ events: 1, deadLetters: 0 });
    } finally {
      await holder.query('SELECT pg_advisory_unlock_all()').catch(() => undefined);
      await holder.release();
      await h.drop();
    }
  });
});
