import { Injectable } from '@nestjs/common';
import { MemoryOutboxStore, OutboxHandler } from 'nestjs-outbox';
import { createOutboxApp, deferred, TestApp, tick } from '../support/outbox-app';

/**
 * drain() reserves the slots it claims for, so the running poll loop (a wake-up after a handler,
 * an interval tick, onAppended) cannot claim the same free slots: never more than `concurrency`.
 */
describe('OutboxDispatcher.drain() while the poll loop runs', () => {
  let t: TestApp | undefined;
  beforeEach(() =>
    jest.useFakeTimers({
      now: new Date('2026-06-01T00:00:00Z'),
      doNotFake: ['nextTick', 'setImmediate'],
    }),
  );
  afterEach(async () => {
    await t?.app.close();
    t = undefined;
    jest.useRealTimers();
  });

  it('never runs more than `concurrency` handlers', async () => {
    const store = new MemoryOutboxStore();
    const realClaim = store.claim.bind(store);
    jest.spyOn(store, 'claim').mockImplementation(async (req) => {
      await new Promise((r) => setTimeout(r, 30)); // a slow round trip
      return realClaim(req);
    });
    const gates: Array<ReturnType<typeof deferred<void>>> = [];
    let running = 0;
    let peak = 0;
    @Injectable()
    class Gated {
      @OutboxHandler('gated')
      async handle() {
        running++;
        peak = Math.max(peak, running);
        const g = deferred<void>();
        gates.push(g);
        await g.promise;
        running--;
      }
    }
    t = await createOutboxApp([Gated], {
      store,
      dispatcher: { concurrency: 2, batchSize: 2, pollInterval: 60_000 },
    });
    await tick(100);
    await t.outbox.append(Array.from({ length: 6 }, () => ({ type: 'gated', payload: {} })));
    await tick(100); // the wake-up claim takes 2 (a full batch: morePending)
    expect(running).toBe(2);
    const drained = t.dispatcher.drain();
    await tick(0);
    gates.shift()!.resolve(); // one slot frees: drain and the poll loop both claim it
    for (let i = 0; i < 10; i++) {
      await tick(50);
      while (gates.length > 0 && i > 2) gates.shift()!.resolve();
    }
    await drained;
    expect(peak).toBeLessThanOrEqual(2);
  });
});
