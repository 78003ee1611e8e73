import { Injectable, Type } from '@nestjs/common';
import {
  HandlerTimeoutError,
  Inbox,
  Lease,
  LeaseLostError,
  MemoryOutboxStore,
  NonRetryableError,
  OutboxBatchError,
  OutboxEvent,
  OutboxHandler,
  OutboxHandlerOptions,
  OutboxOptionsError,
  OutboxShutdownError,
} from 'nestjs-outbox';
import type { OutboxBatchContext } from 'nestjs-outbox';
import { createOutboxApp, TestApp } from '../support/outbox-app';
import { eventually } from '../support/store-targets';

/** Resolves when the signal aborts: a handler that honours it. */
function aborted(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
}

type N = { n: number };

describe('batch handlers: one call interrupted as a whole (memory store)', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.app.close();
    t = undefined;
  });

  it('a batch that outlives timeoutMs fails every event (signal aborted), each retried on its own', async () => {
    const calls: { ns: number[]; attempts: number[]; reason?: unknown }[] = [];
    @Injectable()
    class Slow {
      @OutboxHandler('t.metric', { name: 'slow', batch: { max: 10 }, timeoutMs: 100 })
      async write(events: OutboxEvent<N>[], ctx: OutboxBatchContext) {
        const call = {
          ns: events.map((e) => e.payload.n),
          attempts: ctx.deliveries.map((d) => d.attempt),
        };
        calls.push(call);
        if (calls.length > 1) return;
        await aborted(ctx.signal).catch((reason) => {
          (call as { reason?: unknown }).reason = reason;
          throw reason;
        });
      }
    }
    t = await createOutboxApp([Slow], {
      dispatcher: { pollInterval: 20, backoff: { initialMs: 20, jitter: 0 } },
    });
    await t.outbox.append([0, 1, 2].map((n) => ({ type: 't.metric', payload: { n } })));
    expect(await eventually(() => t!.dispatcher.stats().succeeded === 3, 5_000)).toBe(true);
    expect(calls[0].ns).toEqual([0, 1, 2]);
    expect(calls[0].reason).toBeInstanceOf(HandlerTimeoutError);
    expect(calls.slice(1).flatMap((c) => c.attempts)).toEqual([2, 2, 2]);
    expect(t.dispatcher.stats()).toMatchObject({ retried: 3, failed: 3, abandoned: 0 });
  });

  it('a batch ignoring its aborted signal is abandoned per event and none restarts beside it', async () => {
    let started = 0;
    @Injectable()
    class Stuck {
      @OutboxHandler('s.metric', {
        name: 'stuck',
        batch: { max: 10 },
        timeoutMs: 100,
        maxAttempts: 2,
      })
      write() {
        started++;
        return new Promise(() => undefined);
      }
    }
    const store = new MemoryOutboxStore();
    t = await createOutboxApp([Stuck], {
      store,
      dispatcher: { pollInterval: 20, backoff: { initialMs: 20, jitter: 0 } },
    });
    await t.outbox.append([0, 1].map((n) => ({ type: 's.metric', payload: { n } })));
    expect(await eventually(() => t!.dispatcher.stats().deadLettered === 2, 5_000)).toBe(true);
    expect(started).toBe(1);
    const { items } = await store.listDeadLetters({ limit: 10 });
    expect(items.map((d) => [d.reason, d.errors.map((e) => e.name)])).toEqual([
      ['exhausted', ['HandlerTimeoutError', 'AbandonedRunError']],
      ['exhausted', ['HandlerTimeoutError', 'AbandonedRunError']],
    ]);
    expect(t.dispatcher.stats()).toMatchObject({ abandoned: 2, abandonedRunning: 2 });
  });

  it('a lost lease stops the batch: that event is discarded, its neighbours retried', async () => {
    let lostId: string | null = null;
    class LosingStore extends MemoryOutboxStore {
      override async renew(lease: Lease, leaseMs: number): Promise<Lease> {
        if (lease.deliveryId === lostId) throw new LeaseLostError(lease.deliveryId, lease.owner);
        return super.renew(lease, leaseMs);
      }
    }
    const reasons: unknown[] = [];
    const seen: number[][] = [];
    @Injectable()
    class Long {
      @OutboxHandler('l.metric', { name: 'long', batch: { max: 10 } })
      async write(events: OutboxEvent<N>[], ctx: OutboxBatchContext) {
        seen.push(events.map((e) => e.payload.n));
        if (seen.length > 1) return;
        lostId = ctx.deliveries[1].deliveryId;
        await aborted(ctx.signal).catch((reason) => {
          reasons.push(reason);
          throw reason;
        });
      }
    }
    t = await createOutboxApp([Long], {
      store: new LosingStore(),
      dispatcher: { pollInterval: 20, leaseMs: 300, backoff: { initialMs: 20, jitter: 0 } },
    });
    await t.outbox.append([0, 1, 2].map((n) => ({ type: 'l.metric', payload: { n } })));
    // The lost one comes back once its lease runs out (300 ms), the others after the backoff.
    expect(await eventually(() => t!.dispatcher.stats().succeeded === 3, 5_000)).toBe(true);
    expect(reasons[0]).toBeInstanceOf(LeaseLostError);
    expect(seen[0]).toEqual([0, 1, 2]);
    expect(seen.slice(1).flat().sort()).toEqual([0, 1, 2]);
    expect(t.dispatcher.stats()).toMatchObject({ leaseLost: 1, retried: 2 });
  });

  it('shutdown aborts a running batch and writes no outcome for its events', async () => {
    const reasons: unknown[] = [];
    let running!: () => void;
    const started = new Promise<void>((resolve) => (running = resolve));
    @Injectable()
    class Draining {
      @OutboxHandler('d.metric', { name: 'draining', batch: { max: 10 } })
      async write(_events: OutboxEvent<N>[], ctx: OutboxBatchContext) {
        running();
        await aborted(ctx.signal).catch((reason) => {
          reasons.push(reason);
          throw reason;
        });
      }
    }
    const store = new MemoryOutboxStore();
    t = await createOutboxApp([Draining], {
      store,
      dispatcher: { pollInterval: 20, shutdownTimeoutMs: 100 },
    });
    await t.outbox.append([0, 1].map((n) => ({ type: 'd.metric', payload: { n } })));
    await started;
    await t.app.close();
    t = undefined;
    expect(reasons[0]).toBeInstanceOf(OutboxShutdownError);
    // Still leased: another worker gets them once the lease runs out.
    expect((await store.stats()).leased).toBe(2);
  });
});

describe('batch handlers: options checked at bootstrap', () => {
  function handlerWith(options: OutboxHandlerOptions, inbox = false): Type {
    @Injectable()
    class Bad {
      @OutboxHandler('bad.type', options)
      write() {}
    }
    if (inbox)
      Inbox()(Bad.prototype, 'write', Object.getOwnPropertyDescriptor(Bad.prototype, 'write')!);
    return Bad;
  }

  it.each([
    [
      { batch: { max: 0 } },
      /@OutboxHandler batch\.max on Bad\.write.*integer from 1 to 1000, got 0/,
    ],
    [{ batch: { max: 1001 } }, /batch\.max .*got 1001/],
    [{ batch: { max: 2.5 } }, /batch\.max .*got 2\.5/],
    [{ batch: { max: '10' } }, /batch\.max .*got "10"/],
    [{ batch: {} }, /batch\.max .*got undefined/],
    // Number(process.env.X) of an unset variable: said as NaN, not as JSON's null.
    [{ batch: { max: NaN } }, /batch\.max .*got NaN$/],
    [{ batch: { max: Infinity } }, /batch\.max .*got Infinity$/],
    [{ batch: { max: -1 } }, /batch\.max .*got -1$/],
    [{ batch: { max: 10 }, timeoutMs: NaN }, /timeoutMs on Bad\.write.*got NaN$/],
    [{ batch: 10 }, /@OutboxHandler batch on Bad\.write.*expected \{ max: number \}, got 10/],
    [{ batch: { max: 10, maxWait: 5 } }, /batch\.maxWait on Bad\.write/],
    [
      { batch: { max: 10 }, idempotency: { store: 'X' } },
      /batch on Bad\.write.*cannot be combined with `idempotency`/,
    ],
  ])('refuses %j', async (options, message) => {
    const failure = createOutboxApp([handlerWith(options as OutboxHandlerOptions)]);
    await expect(failure).rejects.toThrow(OutboxOptionsError);
    await expect(failure).rejects.toThrow(message);
  });

  it('refuses @Inbox() on a batch handler', async () => {
    await expect(createOutboxApp([handlerWith({ batch: { max: 5 } }, true)])).rejects.toThrow(
      /@OutboxHandler batch on Bad\.write.*@Inbox\(\) records one message per call/,
    );
  });
});

describe('batch handlers: OutboxBatchError names only events of its batch (memory store)', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.app.close();
    t = undefined;
  });

  it('a name that is not an event id of the batch (a delivery id) fails every event, none is acked', async () => {
    const calls: { ns: number[]; attempts: number[] }[] = [];
    @Injectable()
    class ByDeliveryId {
      @OutboxHandler('u.metric', { name: 'by-delivery', batch: { max: 10 }, maxAttempts: 3 })
      write(events: OutboxEvent<N>[], ctx: OutboxBatchContext) {
        calls.push({
          ns: events.map((e) => e.payload.n),
          attempts: ctx.deliveries.map((d) => d.attempt),
        });
        if (calls.length > 1) return;
        // A mistake: the delivery id is not how events are named.
        throw new OutboxBatchError([[ctx.deliveries[1].deliveryId, new Error('index refused')]]);
      }
    }
    const store = new MemoryOutboxStore();
    t = await createOutboxApp([ByDeliveryId], {
      store,
      dispatcher: { pollInterval: 20, backoff: { initialMs: 20, jitter: 0 } },
    });
    await t.outbox.append([0, 1, 2].map((n) => ({ type: 'u.metric', payload: { n } })));
    expect(await eventually(() => t!.dispatcher.stats().succeeded === 3, 5_000)).toBe(true);
    // Not silently acknowledged: the failure reaches every event, each retried on its own.
    expect(calls.slice(1).flatMap((c) => c.attempts)).toEqual([2, 2, 2]);
    expect(t.dispatcher.stats()).toMatchObject({ retried: 3, failed: 3 });
  });

  it('a handler that empties its events array can still name the failed ones', async () => {
    const runs = new Map<number, number>();
    @Injectable()
    class H {
      @OutboxHandler('q6.metric', { name: 'q6', batch: { max: 10 }, maxAttempts: 2 })
      write(events: OutboxEvent<N>[]) {
        const failed: [OutboxEvent<N>, unknown][] = [];
        while (events.length > 0) {
          const e = events.shift()!;
          runs.set(e.payload.n, (runs.get(e.payload.n) ?? 0) + 1);
          if (e.payload.n === 1) failed.push([e, new NonRetryableError('no')]);
        }
        if (failed.length) throw new OutboxBatchError(failed);
      }
    }
    t = await createOutboxApp([H], { dispatcher: { enabled: false } });
    await t.outbox.append([0, 1, 2].map((n) => ({ type: 'q6.metric', payload: { n } })));
    await t.dispatcher.drain();
    expect([0, 1, 2].map((n) => runs.get(n))).toEqual([1, 1, 1]);
    expect(t.dispatcher.stats()).toMatchObject({ succeeded: 2, deadLettered: 1, retried: 0 });
  });
});
