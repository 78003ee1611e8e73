import { Injectable } from '@nestjs/common';
import { MemoryOutboxStore, NonRetryableError, OutboxHandler } from 'nestjs-outbox';
import { createOutboxApp, TestApp } from '../support/outbox-app';

/**
 * drain() is what users' tests rely on: it returns only when nothing it could claim remains and
 * every outcome is written — also when outcomes are slow to write (a loaded database) and a key's
 * next event can only be claimed after its elder's outcome is in.
 */
describe('OutboxDispatcher.drain() under a slow store', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.app.close();
    t = undefined;
  });

  it('returns after every keyed event is dead-lettered and every success acknowledged, with slow writes and the poll loop running', async () => {
    const store = new MemoryOutboxStore();
    const slow =
      <A extends unknown[], R>(fn: (...args: A) => Promise<R>) =>
      async (...args: A): Promise<R> => {
        await new Promise((r) => setTimeout(r, 5 + Math.random() * 25));
        return fn(...args);
      };
    store.deadLetter = slow(store.deadLetter.bind(store));
    store.ackMany = slow(store.ackMany!.bind(store));
    store.claim = slow(store.claim.bind(store));
    @Injectable()
    class Picky {
      @OutboxHandler('picky')
      handle(event: { payload: unknown }) {
        if ((event.payload as { i: number }).i % 2 === 0) throw new NonRetryableError('no');
      }
    }
    t = await createOutboxApp([Picky], { store, dispatcher: { pollInterval: 20, concurrency: 4 } });
    await t.outbox.append(
      Array.from({ length: 60 }, (_, i) => ({ type: 'picky', key: `k${i % 3}`, payload: { i } })),
    );
    await t.dispatcher.drain();
    expect(await store.stats()).toMatchObject({ pending: 0, leased: 0, dead: 30 });
    expect(t.dispatcher.stats()).toMatchObject({ succeeded: 30, deadLettered: 30 });
  });

  it('does not return on a claim that saw keys still held by outcomes written while it was on its way', async () => {
    const store = new MemoryOutboxStore();
    // A database answers from the state at the start of the statement: take the result first,
    // deliver it 60 ms later; outcomes meanwhile land after 10 ms.
    const claim = store.claim.bind(store);
    store.claim = async (req) => {
      const result = await claim(req);
      await new Promise((r) => setTimeout(r, 60));
      return result;
    };
    const deadLetter = store.deadLetter.bind(store);
    store.deadLetter = async (...args) => {
      await new Promise((r) => setTimeout(r, 10));
      return deadLetter(...args);
    };
    @Injectable()
    class Refuses {
      @OutboxHandler('refused')
      handle() {
        throw new NonRetryableError('no');
      }
    }
    t = await createOutboxApp([Refuses], { store, dispatcher: { enabled: false } });
    await t.outbox.append(
      Array.from({ length: 12 }, (_, i) => ({ type: 'refused', key: `k${i % 2}`, payload: { i } })),
    );
    await t.dispatcher.drain();
    expect(await store.stats()).toMatchObject({ pending: 0, leased: 0, dead: 12 });
  });
});
