import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import { HandlerSubscription } from '../../../lib/interfaces/outbox-store.interface';
import { TypeOrmOutboxStore } from '../../../lib/stores/typeorm/internal';
import { describeWithService } from '../../support/services';
import { openUnpreparedPgStore, SERVICE_OF, watchStatements } from './typeorm-test-helpers';

const A: HandlerSubscription = { name: 'A.handle', types: ['race.event'] };
const COUNT = 1_100; // more than one replay batch (1,000)

/**
 * A bulk replay by filter moves dead letters back in batches. Deliveries of its first batch that
 * a worker claims and dead-letters again before the next batch runs are newer dead letters of the
 * same filter: the replay must not take them again (the store contract's race test meets this
 * only when the timing falls that way; here the worker always gets there first).
 */
describeWithService(SERVICE_OF.postgres, 'typeorm replay by filter', () => {
  let pg: Awaited<ReturnType<typeof openUnpreparedPgStore>>;
  let ds: DataSource;
  let h: typeof pg.h;
  let store: TypeOrmOutboxStore;

  beforeAll(async () => {
    pg = await openUnpreparedPgStore('rrace');
    ({ ds, h, store } = pg);
  }, 60_000);
  afterAll(async () => pg?.close());

  it('replays each dead letter once, while a worker dead-letters its first batch again', async () => {
    for (let i = 0; i < COUNT; i += 550) {
      await store.append(
        Array.from({ length: 550 }, (_, j) => ({
          id: randomUUID(),
          type: 'race.event',
          key: null,
          payload: { i: i + j },
          headers: {},
          occurredAt: new Date(),
          availableAt: null,
          handlers: ['A.handle'],
        })),
      );
    }
    const fail = async (worker: string) => {
      const claimed = await store.claim({
        workerId: worker,
        handlers: [A],
        limit: COUNT,
        leaseMs: 60_000,
      });
      for (const c of claimed) {
        await store.deadLetter(c.lease, 'rejected', {
          name: 'Error',
          message: 'still failing',
          attempt: c.attempt,
          workerId: worker,
        });
      }
      return claimed.length;
    };
    expect(await fail('w1')).toBe(COUNT);
    await new Promise((resolve) => setTimeout(resolve, 5));

    // After the replay's first batch is written, a worker claims what it moved back and
    // dead-letters it again before the replay reads its next batch.
    const dl = h.tables.deadLetters.text.replace(/"/g, '');
    let batches = 0;
    let failedAgain = 0;
    const replayed = await watchStatements(
      ds,
      async (text) => {
        const moved = /WITH moved AS \(DELETE FROM/.test(text);
        if (moved && text.replace(/"/g, '').includes(`DELETE FROM ${dl}`) && batches++ === 0) {
          failedAgain = await fail('w2');
        }
      },
      () => store.replay({ filter: { type: 'race.event' } }),
    );
    expect(failedAgain).toBe(1_000);
    expect(replayed).toBe(COUNT);
    // What failed again during the replay is still a dead letter, for a later replay.
    expect((await store.stats()).dead).toBe(1_000);
  }, 120_000);
});
