import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, expect, it } from '@jest/globals';
import { DataSource, QueryRunner } from 'typeorm';
import {
  AppendableEvent,
  ClaimedDelivery,
  HandlerSubscription,
} from '../../../lib/interfaces/outbox-store.interface';
import { UNEXPANDED_HANDLER } from '../../../lib/outbox.constants';
import { describeWithService } from '../../support/services';
import {
  openDataSource,
  SERVICE_OF,
  storeFor,
  TestDialect,
  uniquePrefix,
} from './typeorm-test-helpers';

const TYPE = 'acct.changed';
const H: HandlerSubscription = { name: 'H', types: [TYPE] };

function event(key: string, handlers: string[]): AppendableEvent {
  const id = randomUUID();
  return {
    id,
    type: TYPE,
    payload: { id },
    key,
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers,
  };
}

/**
 * SPEC §2.6 across expansion: E1 (key K) was appended by a process without a handler for its type
 * (one unexpanded delivery), E2 (key K) by a process that knows H. While another worker is in the
 * middle of expanding E1 (its transaction holds the placeholder row, or has already replaced it
 * with uncommitted copies), a claim for H must not hand out E2, and must not wait for that worker.
 */
function expansionRaceOn(dialect: TestDialect): void {
  let ds: DataSource;
  let h: Awaited<ReturnType<typeof storeFor>>;
  let other: QueryRunner;
  const D = () => h.tables.deliveries.text;
  const claim = (): Promise<ClaimedDelivery[]> =>
    h.store.claim({ workerId: 'B', handlers: [H], limit: 10, leaseMs: 30_000 });
  const ids = (claimed: ClaimedDelivery[]) => claimed.map((c) => c.event.id);

  beforeAll(async () => {
    ds = await openDataSource(dialect);
    h = await storeFor(ds, uniquePrefix(`x${dialect.slice(0, 2)}`));
  });
  afterAll(async () => {
    await h?.drop();
    await ds?.destroy();
  });
  beforeEach(async () => {
    await h.empty();
    // Worker A, on its own connection, in its expansion transaction.
    other = ds.createQueryRunner('master');
    await other.connect();
  });
  afterEach(async () => {
    if (other.isTransactionActive) await other.rollbackTransaction();
    await other.release();
  });

  async function appendPair(): Promise<[AppendableEvent, AppendableEvent]> {
    const e1 = event('K', []);
    const e2 = event('K', [H.name]);
    await h.store.append([e1]);
    await h.store.append([e2]);
    return [e1, e2];
  }

  it('does not claim the later event while the earlier one is locked for expansion', async () => {
    const [e1, e2] = await appendPair();
    await other.startTransaction();
    await other.query(`SELECT id FROM ${D()} WHERE handler = '${UNEXPANDED_HANDLER}' FOR UPDATE`);

    expect(ids(await claim())).toEqual([]);

    // A gives up (rolls back): the placeholder is back in play and B expands it itself.
    await other.rollbackTransaction();
    const first = await claim();
    expect(ids(first)).toEqual([e1.id]);
    await h.store.ack(first[0].lease);
    expect(ids(await claim())).toEqual([e2.id]);
  }, 30_000);

  it('does not claim the later event while the expansion of the earlier one is uncommitted', async () => {
    const [e1, e2] = await appendPair();
    await other.startTransaction();
    const placeholders = (await other.query(
      `SELECT id FROM ${D()} WHERE handler = '${UNEXPANDED_HANDLER}' FOR UPDATE`,
    )) as Array<{ id: string }>;
    expect(placeholders).toHaveLength(1);
    const p = dialect === 'postgres' ? (n: number) => `$${n}` : () => '?';
    // Exactly what expand() writes: one copy per handler, then the placeholder goes.
    await other.query(
      `INSERT INTO ${D()} (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors) ` +
        `SELECT ${p(1)}, event_seq, event_type, event_key, ${p(2)}, status, attempts, available_at, errors FROM ${D()} WHERE id = ${p(3)}`,
      [randomUUID(), H.name, placeholders[0].id],
    );
    await other.query(`DELETE FROM ${D()} WHERE id = ${p(1)}`, [placeholders[0].id]);

    expect(ids(await claim())).toEqual([]);

    await other.commitTransaction();
    const first = await claim();
    expect(ids(first)).toEqual([e1.id]);
    expect(ids(await claim())).toEqual([]);
    await h.store.ack(first[0].lease);
    expect(ids(await claim())).toEqual([e2.id]);
  }, 30_000);

  it('lets a later event of another key pass while a placeholder is locked', async () => {
    const [e1] = await appendPair();
    const free = event('L', [H.name]);
    await h.store.append([free]);
    await other.startTransaction();
    await other.query(`SELECT id FROM ${D()} WHERE handler = '${UNEXPANDED_HANDLER}' FOR UPDATE`);

    expect(ids(await claim())).toEqual([free.id]);
    await other.rollbackTransaction();
    expect(ids(await claim())).toEqual([e1.id]);
  }, 30_000);
}

describeWithService(SERVICE_OF.postgres, 'typeorm expansion race', () =>
  expansionRaceOn('postgres'),
);
describeWithService(SERVICE_OF.mariadb, 'typeorm expansion race', () => expansionRaceOn('mariadb'));
