import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import {
  AppendableEvent,
  HandlerSubscription,
} from '../../../lib/interfaces/outbox-store.interface';
import { createDialect } from '../../../lib/stores/typeorm/dialects';
import { describeWithService } from '../../support/services';
import {
  openDataSource,
  SERVICE_OF,
  storeFor,
  TestDialect,
  uniquePrefix,
} from './typeorm-test-helpers';

const H: HandlerSubscription = { name: 'H', types: ['due.event'] };
const ROUNDS = 300;

function event(): AppendableEvent {
  const id = randomUUID();
  return {
    id,
    type: 'due.event',
    payload: { id },
    key: null,
    headers: {},
    occurredAt: new Date(),
    availableAt: null,
    handlers: [H.name],
  };
}

/**
 * "Due now" written by the database clock is due at once (docs/guarantees.md, Guarantees 5): an event appended
 * without a due time, or retried with no delay, is claimable by the very next claim. PostgreSQL's
 * `TIMESTAMPTZ(3)` rounds a stored time to the millisecond, so an unrounded `now()` could be stored
 * up to half a millisecond in the future, and a claim within it found nothing.
 */
function dueNowOn(dialect: TestDialect): void {
  let ds: DataSource;
  let h: Awaited<ReturnType<typeof storeFor>>;

  beforeAll(async () => {
    ds = await openDataSource(dialect);
    h = await storeFor(ds, uniquePrefix(`dn${dialect.slice(0, 2)}`));
  });
  afterAll(async () => {
    await h?.drop();
    await ds?.destroy();
  });

  if (dialect !== 'sqlite') {
    it('stores an append without a due time as due at the very time it was written', async () => {
      // In the appending transaction itself, so PostgreSQL's now() is the time the append used:
      // the stored due time must pass the claim's own "due" test at that instant.
      const d = createDialect(ds, { tablePrefix: h.tables.prefix });
      let notDue = 0;
      for (let i = 0; i < 100; i++) {
        await ds.transaction(async (manager) => {
          const [appended] = await h.store.append([event()], { manager });
          const rows = (await manager.query(
            `SELECT COUNT(*) AS n FROM ${h.tables.events.text} e WHERE e.id = ${dialect === 'postgres' ? '$1' : '?'} AND e.available_at <= ${d.now.text}`,
            [appended.id],
          )) as Array<{ n: number | string }>;
          if (Number(rows[0].n) !== 1) notDue++;
        });
      }
      // Before (PostgreSQL): about half of them (now() rounded up to the next millisecond).
      expect(notDue).toBe(0);
    });
  }

  it(`claims at once after append and after retry(…, 0), ${ROUNDS} times in a row`, async () => {
    const claim = () => h.store.claim({ workerId: 'w', handlers: [H], limit: 10, leaseMs: 60_000 });
    let emptyAfterAppend = 0;
    let emptyAfterRetry = 0;
    for (let i = 0; i < ROUNDS; i++) {
      await h.store.append([event()]);
      let [first] = await claim();
      if (!first) {
        emptyAfterAppend++;
        await new Promise((resolve) => setTimeout(resolve, 5));
        [first] = await claim();
      }
      await h.store.retry(first.lease, 0, {
        name: 'Error',
        message: 'again',
        attempt: 1,
        workerId: 'w',
      });
      let [again] = await claim();
      if (!again) {
        emptyAfterRetry++;
        await new Promise((resolve) => setTimeout(resolve, 5));
        [again] = await claim();
      }
      await h.store.ack(again.lease);
    }
    // Before (PostgreSQL): 21 of 300 claims right after retry(…, 0) came back empty.
    expect({ emptyAfterAppend, emptyAfterRetry }).toEqual({
      emptyAfterAppend: 0,
      emptyAfterRetry: 0,
    });
  }, 120_000);
}

describeWithService(SERVICE_OF.postgres, 'typeorm due now', () => dueNowOn('postgres'));
describeWithService(SERVICE_OF.mariadb, 'typeorm due now', () => dueNowOn('mariadb'));
describe('typeorm due now [sqlite]', () => dueNowOn('sqlite'));
