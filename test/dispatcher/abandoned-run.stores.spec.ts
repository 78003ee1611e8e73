import { Injectable } from '@nestjs/common';
import { OutboxEvent, OutboxHandler } from 'nestjs-outbox';
import { createOutboxApp, TestApp } from '../support/outbox-app';
import { describeOnStores, eventually, StoreTarget } from '../support/store-targets';

/**
 * docs/handlers.md (Retries) and Guarantees 8: a handler that outlives its
 * timeout and ignores its aborted signal does not hold its key forever. Each later claim of the
 * delivery while that run still executes is a failed attempt, so it ends as a dead letter
 * (`exhausted`) after `maxAttempts`, the key's next event runs and no lease stays held.
 */
function abandonedRunOn(target: StoreTarget): void {
  let opened: Awaited<ReturnType<StoreTarget['open']>>;
  let t: TestApp | undefined;
  beforeAll(async () => {
    opened = await target.open();
  });
  afterAll(async () => {
    await t?.app.close();
    await opened?.close();
  });

  it('a timed-out handler that never settles is dead-lettered (exhausted) and frees its key', async () => {
    const started: number[] = [];
    @Injectable()
    class Stuck {
      @OutboxHandler('acct.changed', { name: 'stuck', timeoutMs: 100, maxAttempts: 3 })
      handle(event: OutboxEvent<{ n: number }>) {
        started.push(event.payload.n);
        // Ignores its signal and never settles.
        if (event.payload.n === 1) return new Promise(() => undefined);
      }
    }
    t = await createOutboxApp([Stuck], {
      store: opened.store,
      dispatcher: { pollInterval: 20, leaseMs: 1_000, backoff: { initialMs: 50, jitter: 0 } },
    });
    const [first, second] = await t.outbox.append([
      { type: 'acct.changed', payload: { n: 1 }, key: 'acct-1' },
      { type: 'acct.changed', payload: { n: 2 }, key: 'acct-1' },
    ]);
    expect(await eventually(() => started.includes(2), 8_000)).toBe(true);
    // The stuck handler was started once: later attempts never start beside it on this worker.
    expect(started).toEqual([1, 2]);
    const { items } = await opened.store.listDeadLetters({ limit: 10 });
    expect(items).toHaveLength(1);
    expect(items[0]).toMatchObject({ eventId: first.id, reason: 'exhausted', attempts: 3 });
    expect(items[0].errors.map((e) => e.name)).toEqual([
      'HandlerTimeoutError',
      'AbandonedRunError',
      'AbandonedRunError',
    ]);
    expect(items[0].errors[2].message).toMatch(/still running/);
    expect(
      await eventually(async () => {
        const stats = await opened.store.stats();
        return stats.leased === 0 && stats.pending === 0;
      }, 5_000),
    ).toBe(true);
    expect(second.id).toBeDefined();
    expect(t.dispatcher.stats()).toMatchObject({ abandoned: 1, deadLettered: 1, succeeded: 1 });
  }, 20_000);
}

describeOnStores('a handler that ignores its abort signal', 'ab', abandonedRunOn);
