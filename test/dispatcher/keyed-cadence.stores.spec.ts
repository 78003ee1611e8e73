import { Injectable } from '@nestjs/common';
import { OutboxEvent, OutboxHandler } from 'nestjs-outbox';
import { createOutboxApp, TestApp } from '../support/outbox-app';
import { describeOnStores, eventually, StoreTarget } from '../support/store-targets';

const KEYS = 10;
const PER_KEY = 10;
/** Far longer than the drain may take: only claims the loop owes itself can drain in time. */
const POLL_INTERVAL = 10_000;

type N = { n: number };

/** Every run of one handler: key and number, in the order they started. */
const runs: Record<'a' | 'b', { key: string; n: number }[]> = { a: [], b: [] };

@Injectable()
class TwoHandlers {
  @OutboxHandler('cadence.step', { name: 'Cadence.a' })
  async a(event: OutboxEvent<N>): Promise<void> {
    runs.a.push({ key: event.key!, n: event.payload.n });
    await new Promise((resolve) => setImmediate(resolve));
  }

  @OutboxHandler('cadence.step', { name: 'Cadence.b' })
  async b(event: OutboxEvent<N>): Promise<void> {
    runs.b.push({ key: event.key!, n: event.payload.n });
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/**
 * A keyed backlog: a claim takes only the head of each (handler, key), so each key's next event
 * becomes claimable only once its elder's outcome is written. The loop claims again then, not on
 * the next poll tick: with a 10 s poll interval, 10 events per key drain in well under one tick
 * (waiting for ticks would take 9 of them), and an outbox left idle is not claimed in a loop.
 */
function keyedCadenceOn(target: StoreTarget): void {
  let t: TestApp | undefined;
  let close: (() => Promise<void>) | undefined;

  afterEach(async () => {
    await t?.app.close();
    t = undefined;
    await close?.();
    close = undefined;
  });

  it(`drains ${KEYS} keys × ${PER_KEY} events for two handlers without waiting for poll ticks, in order per key, then stops claiming`, async () => {
    runs.a = [];
    runs.b = [];
    const opened = await target.open();
    close = opened.close;
    t = await createOutboxApp([TwoHandlers], {
      store: opened.store,
      dispatcher: { enabled: false, wakeups: false, pollInterval: POLL_INTERVAL },
    });
    await t.outbox.append(
      Array.from({ length: KEYS * PER_KEY }, (_, i) => ({
        type: 'cadence.step',
        key: `k${i % KEYS}`,
        payload: { n: Math.floor(i / KEYS) },
      })),
    );
    const claim = jest.spyOn(opened.store, 'claim');
    const started = performance.now();
    t.dispatcher.start();
    const total = KEYS * PER_KEY;
    const drained = await eventually(
      () => runs.a.length >= total && runs.b.length >= total,
      POLL_INTERVAL / 2,
    );
    const drainMs = performance.now() - started;
    expect({ drained, a: runs.a.length, b: runs.b.length }).toEqual({
      drained: true,
      a: total,
      b: total,
    });
    expect(drainMs).toBeLessThan(POLL_INTERVAL / 2);
    // Per handler and key, in append order: each ran once.
    for (const handler of ['a', 'b'] as const) {
      for (let k = 0; k < KEYS; k++) {
        const order = runs[handler].filter((r) => r.key === `k${k}`).map((r) => r.n);
        expect(order).toEqual(Array.from({ length: PER_KEY }, (_, n) => n));
      }
    }
    await eventually(() => t!.dispatcher.stats().succeeded === 2 * total, 5_000);
    expect(t.dispatcher.stats()).toMatchObject({ succeeded: 2 * total, failed: 0 });
    // Idle: the last acks owe one claim, which finds nothing and owes nothing more.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const settled = claim.mock.calls.length;
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(claim.mock.calls.length).toBe(settled);
  }, 30_000);
}

describeOnStores('keyed backlog cadence', 'kc', keyedCadenceOn, ['memory', 'postgres', 'redis']);
