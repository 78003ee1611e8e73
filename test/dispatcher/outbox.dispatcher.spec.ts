import { CanActivate, Injectable, UseGuards } from '@nestjs/common';
import {
  LeaseLostError,
  MemoryIdempotencyStore,
  MemoryOutboxStore,
  NonRetryableError,
  OutboxEvent,
  OutboxHandler,
  OutboxHandlerContext,
  OutboxStore,
} from 'nestjs-outbox';
import { createOutboxApp, deferred, TestApp, tick } from '../support/outbox-app';

describe('OutboxDispatcher', () => {
  let t: TestApp | undefined;

  beforeEach(() => {
    jest.useFakeTimers({
      now: new Date('2026-06-01T00:00:00Z'),
      doNotFake: ['nextTick', 'setImmediate'],
    });
  });
  afterEach(async () => {
    await t?.app.close();
    t = undefined;
    jest.useRealTimers();
  });

  it('delivers an appended event to its handler with attempt, signal and worker id', async () => {
    const seen: Array<[OutboxEvent, OutboxHandlerContext]> = [];
    @Injectable()
    class H {
      @OutboxHandler('user.created')
      handle(event: OutboxEvent, ctx: OutboxHandlerContext) {
        seen.push([event, ctx]);
      }
    }
    t = await createOutboxApp([H], { dispatcher: { workerId: 'worker-1' } });
    const stored = await t.outbox.append({ type: 'user.created', payload: { id: 7 }, key: 'u7' });
    await tick(150);
    expect(seen).toHaveLength(1);
    expect(seen[0][0]).toMatchObject({
      id: stored.id,
      type: 'user.created',
      payload: { id: 7 },
      key: 'u7',
    });
    expect(seen[0][1]).toMatchObject({ attempt: 1, workerId: 'worker-1', handler: 'H.handle' });
    expect(seen[0][1].signal.aborted).toBe(false);
    // The context is a plain record of its fields: spreading or comparing it keeps `signal`.
    expect(Object.keys(seen[0][1]).sort()).toEqual(
      ['attempt', 'deliveryId', 'handler', 'signal', 'workerId'].sort(),
    );
    expect({ ...seen[0][1] }.signal).toBeInstanceOf(AbortSignal);
    expect(t.dispatcher.stats()).toMatchObject({ succeeded: 1, failed: 0, inFlight: 0 });
    expect((await t.store.stats()).pending).toBe(0);
  });

  it('keeps the lease of a handler running 3× leaseMs and never runs it twice', async () => {
    const store = new MemoryOutboxStore();
    const gate = deferred();
    let runs = 0;
    @Injectable()
    class Slow {
      @OutboxHandler('slow.job')
      async handle() {
        runs++;
        await gate.promise;
      }
    }
    t = await createOutboxApp([Slow], {
      store,
      dispatcher: { leaseMs: 1_000, handlerTimeoutMs: 60_000 },
    });
    await t.outbox.append({ type: 'slow.job', payload: {} });
    await tick(150);
    expect(runs).toBe(1);
    for (let i = 0; i < 30; i++) {
      await tick(100);
      // A rival worker polling the same store finds nothing to take over.
      expect(
        await store.claim({
          workerId: 'rival',
          handlers: [{ name: 'Slow.handle', types: ['slow.job'] }],
          limit: 10,
          leaseMs: 1_000,
        }),
      ).toEqual([]);
    }
    gate.resolve();
    await tick(150);
    expect(runs).toBe(1);
    expect(t.dispatcher.stats()).toMatchObject({ succeeded: 1, leaseLost: 0 });
  });

  it('retries only the failing handler when two handlers share a type', async () => {
    const calls = { ok: 0, flaky: 0 };
    @Injectable()
    class Two {
      @OutboxHandler('order.placed')
      ok() {
        calls.ok++;
      }
      @OutboxHandler('order.placed')
      flaky() {
        calls.flaky++;
        if (calls.flaky < 3) throw new Error('downstream unavailable');
      }
    }
    t = await createOutboxApp([Two]);
    await t.outbox.append({ type: 'order.placed', payload: {} });
    await tick(2_000);
    expect(calls).toEqual({ ok: 1, flaky: 3 });
    expect(t.dispatcher.stats()).toMatchObject({ succeeded: 2, retried: 2 });
  });

  it('holds per-key order under retries', async () => {
    const order: number[] = [];
    let failuresLeft = 2;
    @Injectable()
    class Ordered {
      @OutboxHandler('acct.changed')
      handle(event: OutboxEvent<{ n: number }>) {
        if (event.payload.n === 1 && failuresLeft-- > 0) throw new Error('transient');
        order.push(event.payload.n);
      }
    }
    t = await createOutboxApp([Ordered], { dispatcher: { concurrency: 5 } });
    await t.outbox.append(
      [1, 2, 3].map((n) => ({ type: 'acct.changed', payload: { n }, key: 'acct-1' })),
    );
    await t.outbox.append({ type: 'acct.changed', payload: { n: 99 }, key: 'acct-2' });
    await tick(3_000);
    expect(order.filter((n) => n !== 99)).toEqual([1, 2, 3]);
    expect(order).toContain(99);
    // The other key was not held up by acct-1's retries.
    expect(order.indexOf(99)).toBeLessThan(order.indexOf(1));
  });

  it('dead-letters NonRetryableError at once (rejected) and exhausts retries (exhausted)', async () => {
    @Injectable()
    class Failing {
      @OutboxHandler('bad.input')
      reject() {
        throw new NonRetryableError('payload can never be processed');
      }
      @OutboxHandler('always.fails', { maxAttempts: 3 })
      fail() {
        throw new TypeError('still broken');
      }
      @OutboxHandler('picky', { retryIf: (error) => !(error instanceof RangeError) })
      picky() {
        throw new RangeError('out of range');
      }
    }
    t = await createOutboxApp([Failing]);
    await t.outbox.append([
      { type: 'bad.input', payload: {} },
      { type: 'always.fails', payload: {} },
      { type: 'picky', payload: {} },
    ]);
    await tick(5_000);
    const { items } = await t.store.listDeadLetters({ limit: 10 });
    const byHandler = Object.fromEntries(items.map((d) => [d.handler, d]));
    expect(byHandler['Failing.reject']).toMatchObject({ reason: 'rejected', attempts: 1 });
    expect(byHandler['Failing.picky']).toMatchObject({ reason: 'rejected', attempts: 1 });
    expect(byHandler['Failing.fail']).toMatchObject({ reason: 'exhausted', attempts: 3 });
    expect(byHandler['Failing.fail'].errors.map((e) => e.name)).toEqual([
      'TypeError',
      'TypeError',
      'TypeError',
    ]);
    expect(byHandler['Failing.reject'].errors[0]).toMatchObject({
      name: 'NonRetryableError',
      message: 'payload can never be processed',
    });
  });

  it('backs off exponentially between attempts', async () => {
    const attemptsAt: number[] = [];
    @Injectable()
    class Backoff {
      @OutboxHandler('retry.me', {
        maxAttempts: 4,
        backoff: { initialMs: 1_000, factor: 2, jitter: 0 },
      })
      handle() {
        attemptsAt.push(Date.now());
        throw new Error('nope');
      }
    }
    t = await createOutboxApp([Backoff], { dispatcher: { pollInterval: 50 } });
    await t.outbox.append({ type: 'retry.me', payload: {} });
    await tick(10_000);
    const gaps = attemptsAt.slice(1).map((at, i) => at - attemptsAt[i]);
    expect(gaps).toHaveLength(3);
    expect(gaps[0]).toBeGreaterThanOrEqual(1_000);
    expect(gaps[1]).toBeGreaterThanOrEqual(2_000);
    expect(gaps[2]).toBeGreaterThanOrEqual(4_000);
    gaps.forEach((gap, i) => expect(gap).toBeLessThan(1_000 * 2 ** i + 200));
  });

  it('fails an attempt on handler timeout and aborts the handler signal', async () => {
    const signals: AbortSignal[] = [];
    @Injectable()
    class Hangs {
      @OutboxHandler('hang', { timeoutMs: 500, maxAttempts: 1 })
      handle(_e: OutboxEvent, ctx: OutboxHandlerContext) {
        signals.push(ctx.signal);
        return new Promise(() => undefined);
      }
    }
    t = await createOutboxApp([Hangs]);
    await t.outbox.append({ type: 'hang', payload: {} });
    await tick(800);
    expect(signals).toHaveLength(1);
    expect(signals[0].aborted).toBe(true);
    const { items } = await t.store.listDeadLetters({ limit: 10 });
    expect(items[0]).toMatchObject({ reason: 'exhausted' });
    expect(items[0].errors[0]).toMatchObject({ name: 'HandlerTimeoutError' });
  });

  it('runs at most `concurrency` handlers at once and re-polls at once when a batch was full', async () => {
    let running = 0;
    let peak = 0;
    let done = 0;
    @Injectable()
    class Busy {
      @OutboxHandler('work')
      async handle() {
        running++;
        peak = Math.max(peak, running);
        await new Promise((r) => setImmediate(r));
        running--;
        done++;
      }
    }
    t = await createOutboxApp([Busy], {
      dispatcher: { concurrency: 3, batchSize: 10, pollInterval: 60_000 },
    });
    await t.outbox.append(Array.from({ length: 20 }, (_, i) => ({ type: 'work', payload: { i } })));
    // No poll interval passes: only the start poll and the immediate re-polls run.
    await t.dispatcher.drain();
    expect(done).toBe(20);
    expect(peak).toBeLessThanOrEqual(3);
  });

  it('re-polls without waiting for the interval while batches come back full', async () => {
    let done = 0;
    @Injectable()
    class Quick {
      @OutboxHandler('quick')
      handle() {
        done++;
      }
    }
    // No wake-up on append here: only the interval's poll and its re-polls may claim.
    const store = new MemoryOutboxStore();
    Object.defineProperty(store, 'onAppended', { value: undefined });
    t = await createOutboxApp([Quick], {
      store,
      dispatcher: { batchSize: 5, concurrency: 5, pollInterval: 60_000 },
    });
    await t.outbox.append(
      Array.from({ length: 23 }, (_, i) => ({ type: 'quick', payload: { i } })),
    );
    await tick(1_000);
    expect(done).toBe(0);
    await tick(60_000); // one interval: the first poll finds a full batch and keeps going
    for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
    expect(done).toBe(23);
  });

  it('discards the outcome and counts it when the lease is lost', async () => {
    const store = new MemoryOutboxStore();
    const gate = deferred();
    let signal: AbortSignal | undefined;
    @Injectable()
    class Victim {
      @OutboxHandler('victim')
      async handle(_e: OutboxEvent, ctx: OutboxHandlerContext) {
        signal = ctx.signal;
        await gate.promise;
      }
    }
    const renew = jest.spyOn(store, 'renew').mockImplementation(async (lease) => {
      throw new LeaseLostError(lease.deliveryId, lease.owner);
    });
    const ack = jest.spyOn(store, 'ackMany');
    t = await createOutboxApp([Victim], { store, dispatcher: { leaseMs: 900 } });
    await t.outbox.append({ type: 'victim', payload: {} });
    await tick(450);
    expect(renew).toHaveBeenCalled();
    expect(signal?.aborted).toBe(true);
    expect(signal?.reason).toBeInstanceOf(LeaseLostError);
    gate.resolve();
    await tick(10);
    expect(ack).not.toHaveBeenCalled();
    expect(t.dispatcher.stats().leaseLost).toBe(1);
  });

  it('stops a run whose lease could not be renewed (store unreachable) before the lease runs out, and never runs the delivery twice at once', async () => {
    const store = new MemoryOutboxStore();
    let running = 0;
    let most = 0;
    let starts = 0;
    const signals: AbortSignal[] = [];
    @Injectable()
    class Slow {
      @OutboxHandler('slow')
      async handle(_e: OutboxEvent, ctx: OutboxHandlerContext) {
        starts++;
        running++;
        most = Math.max(most, running);
        signals.push(ctx.signal);
        // Ignores its signal, as a careless handler would: runs 5 s whatever happens.
        await new Promise((resolve) => setTimeout(resolve, 5_000));
        running--;
      }
    }
    // A database failover: every renewal fails with a connection error, not a lease loss.
    jest.spyOn(store, 'renew').mockImplementation(async () => {
      throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), {
        code: 'ECONNREFUSED',
      });
    });
    t = await createOutboxApp([Slow], { store, dispatcher: { leaseMs: 900, pollInterval: 50 } });
    await t.outbox.append({ type: 'slow', payload: {} });
    await tick(60);
    expect(starts).toBe(1);
    // Before the lease (900 ms) ends, the run is given up and its signal aborted.
    await tick(800);
    expect(signals[0].aborted).toBe(true);
    expect(signals[0].reason).toBeInstanceOf(LeaseLostError);
    expect(t.dispatcher.stats()).toMatchObject({
      leaseLost: 1,
      inFlight: 0,
      abandoned: 1,
      abandonedRunning: 1,
    });
    // The lease lapses and the delivery is claimed again, but not started while the first run
    // still executes (those attempts fail, retried with backoff: 200, 400, … 3,200 ms); once it
    // has returned (5 s), the next claim runs it.
    for (let i = 0; i < 100; i++) await tick(100);
    expect(most).toBe(1);
    expect(starts).toBeGreaterThanOrEqual(2);
  });

  it('recovers from a store that throws for 2 s without an unhandled rejection', async () => {
    const store = new MemoryOutboxStore();
    let broken = true;
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    const realClaim = store.claim.bind(store);
    jest.spyOn(store, 'claim').mockImplementation(async (req) => {
      if (broken) throw new Error('connection refused');
      return realClaim(req);
    });
    let handled = 0;
    @Injectable()
    class Patient {
      @OutboxHandler('patient')
      handle() {
        handled++;
      }
    }
    try {
      t = await createOutboxApp([Patient], {
        store,
        dispatcher: { storeErrorBackoffMs: 200, storeErrorMaxBackoffMs: 1_000 },
      });
      await t.outbox.append({ type: 'patient', payload: {} });
      await tick(2_000);
      expect(handled).toBe(0);
      expect(t.dispatcher.stats().storeErrors).toBeGreaterThanOrEqual(3);
      broken = false;
      await tick(1_500);
      expect(handled).toBe(1);
      await new Promise((r) => setImmediate(r));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('app.close() waits for an in-flight handler before returning', async () => {
    const store = new MemoryOutboxStore();
    const gate = deferred();
    let finished = false;
    @Injectable()
    class InFlight {
      @OutboxHandler('inflight')
      async handle() {
        await gate.promise;
        finished = true;
      }
    }
    t = await createOutboxApp([InFlight], { store, dispatcher: { shutdownTimeoutMs: 5_000 } });
    await t.outbox.append({ type: 'inflight', payload: {} });
    await tick(150);
    let closed = false;
    const closing = t.app.close().then(() => (closed = true));
    await tick(1_000);
    expect(closed).toBe(false);
    gate.resolve();
    await closing;
    expect(finished).toBe(true);
    expect(await store.stats()).toMatchObject({ pending: 0, leased: 0 });
    t = undefined;
  });

  it('gives up waiting after shutdownTimeoutMs and aborts the handler signal', async () => {
    let signal: AbortSignal | undefined;
    @Injectable()
    class Stuck {
      @OutboxHandler('stuck')
      handle(_e: OutboxEvent, ctx: OutboxHandlerContext) {
        signal = ctx.signal;
        return new Promise(() => undefined);
      }
    }
    const store = new MemoryOutboxStore();
    t = await createOutboxApp([Stuck], {
      store,
      dispatcher: { shutdownTimeoutMs: 1_000, leaseMs: 600 },
    });
    await t.outbox.append({ type: 'stuck', payload: {} });
    await tick(150);
    const closing = t.app.close();
    await tick(1_100);
    await closing;
    expect(signal?.aborted).toBe(true);
    t = undefined;
    // Nothing of the dispatcher lives on: no renewals, no outcome; the lease simply expires.
    const calls = ['renew', 'ack', 'retry', 'deadLetter'].map((m) => jest.spyOn(store, m as 'ack'));
    await tick(5_000);
    calls.forEach((spy) => expect(spy).not.toHaveBeenCalled());
    expect((await store.stats()).leased).toBe(1);
    const [again] = await store.claim({
      workerId: 'next',
      handlers: [{ name: 'Stuck.handle', types: ['stuck'] }],
      limit: 1,
      leaseMs: 1_000,
    });
    expect(again.attempt).toBe(2);
  });

  it('releases deliveries claimed while shutting down without counting the attempt', async () => {
    const store = new MemoryOutboxStore();
    const claimGate = deferred();
    const realClaim = store.claim.bind(store);
    let handled = 0;
    @Injectable()
    class Late {
      @OutboxHandler('late')
      handle() {
        handled++;
      }
    }
    t = await createOutboxApp([Late], { store, dispatcher: { enabled: false } });
    await t.outbox.append({ type: 'late', payload: {} });
    jest.spyOn(store, 'claim').mockImplementation(async (req) => {
      const claimed = await realClaim(req);
      await claimGate.promise;
      return claimed;
    });
    t.dispatcher.start();
    await tick(10);
    const closing = t.app.close();
    await tick(10); // shutdown has begun: the dispatcher stopped claiming
    expect(t.dispatcher.stats().running).toBe(false);
    claimGate.resolve();
    await closing;
    t = undefined;
    expect(handled).toBe(0);
    const [again] = await realClaim({
      workerId: 'next',
      handlers: [{ name: 'Late.handle', types: ['late'] }],
      limit: 1,
      leaseMs: 1000,
    });
    expect(again.attempt).toBe(1);
  });

  it('pauses and resumes claiming; drain() processes everything due', async () => {
    let handled = 0;
    @Injectable()
    class P {
      @OutboxHandler('p')
      handle() {
        handled++;
      }
    }
    t = await createOutboxApp([P]);
    t.dispatcher.pause();
    await t.outbox.append({ type: 'p', payload: {} });
    await tick(1_000);
    expect(handled).toBe(0);
    expect(t.dispatcher.stats().paused).toBe(true);
    t.dispatcher.resume();
    await tick(150);
    expect(handled).toBe(1);
    t.dispatcher.pause();
    await t.outbox.append([
      { type: 'p', payload: {} },
      { type: 'p', payload: {} },
    ]);
    await t.dispatcher.drain();
    expect(handled).toBe(3);
  });

  it('never claims types it has no handler for', async () => {
    const store: OutboxStore = new MemoryOutboxStore();
    @Injectable()
    class Known {
      @OutboxHandler('known')
      handle() {}
    }
    t = await createOutboxApp([Known], { store });
    await t.outbox.append({ type: 'unknown.kind', payload: {} });
    await tick(1_000);
    const stats = await store.stats();
    expect(stats.byType['unknown.kind']).toEqual({ pending: 1, leased: 0, dead: 0 });
    expect(stats.dead).toBe(0);
  });

  it('skips a redelivered event already handled when the handler has idempotency', async () => {
    const store = new MemoryOutboxStore();
    const idempotency = new MemoryIdempotencyStore();
    let effects = 0;
    @Injectable()
    class Mailer {
      @OutboxHandler('receipt', { idempotency: { store: idempotency } })
      send() {
        effects++;
      }
    }
    // The first outcome is lost (as when a worker dies between the effect and its ack).
    const realAckMany = store.ackMany.bind(store);
    let lose = true;
    jest.spyOn(store, 'ackMany').mockImplementation(async (leases) => {
      if (lose) {
        lose = false;
        return [];
      }
      return realAckMany(leases);
    });
    t = await createOutboxApp([Mailer], { store, dispatcher: { leaseMs: 1_000 } });
    const event = await t.outbox.append({ type: 'receipt', payload: {} });
    await tick(150);
    expect(effects).toBe(1);
    expect((await store.stats()).leased).toBe(1);
    await tick(1_500); // the lease expires and the delivery comes back
    expect(effects).toBe(1);
    expect(await store.stats()).toMatchObject({ pending: 0, leased: 0, dead: 0 });
    expect(await idempotency.isDone('Mailer.send', event.id)).toBe(true);
  });

  it('dead-letters without running a delivery whose earlier attempts all died with their workers', async () => {
    const store = new MemoryOutboxStore();
    let runs = 0;
    @Injectable()
    class Crashy {
      @OutboxHandler('crashy', { maxAttempts: 2 })
      handle() {
        runs++;
      }
    }
    t = await createOutboxApp([Crashy], { store, dispatcher: { enabled: false } });
    await t.outbox.append({ type: 'crashy', payload: {} });
    const handlers = [{ name: 'Crashy.handle', types: ['crashy'] }];
    // Two workers claim it and die without reporting (their leases just expire).
    for (const worker of ['dead-1', 'dead-2']) {
      expect(
        await store.claim({ workerId: worker, handlers, limit: 1, leaseMs: 100 }),
      ).toHaveLength(1);
      await tick(150);
    }
    await t.dispatcher.drain();
    expect(runs).toBe(0);
    const { items } = await store.listDeadLetters({ limit: 10 });
    expect(items[0]).toMatchObject({ reason: 'exhausted', attempts: 3 });
    expect(items[0].errors[0].message).toMatch(/No outcome reported by 2 attempt/);
  });

  it('counts a guard that denies as a failed attempt', async () => {
    class Deny implements CanActivate {
      canActivate() {
        return false;
      }
    }
    let runs = 0;
    @Injectable()
    class Guarded {
      @UseGuards(Deny)
      @OutboxHandler('guarded', { maxAttempts: 1 })
      handle() {
        runs++;
      }
    }
    t = await createOutboxApp([Guarded]);
    await t.outbox.append({ type: 'guarded', payload: {} });
    await tick(300);
    expect(runs).toBe(0);
    const { items } = await t.store.listDeadLetters({ limit: 10 });
    expect(items[0]).toMatchObject({ handler: 'Guarded.handle', reason: 'exhausted' });
    expect(items[0].errors[0].name).toBe('ForbiddenException');
  });

  it('stores error text without NUL characters (PostgreSQL cannot hold them)', async () => {
    @Injectable()
    class Nul {
      @OutboxHandler('nul', { maxAttempts: 1 })
      handle() {
        throw new NonRetryableError('bad\u0000byte');
      }
    }
    t = await createOutboxApp([Nul]);
    await t.outbox.append({ type: 'nul', payload: {} });
    await tick(300);
    const { items } = await t.store.listDeadLetters({ limit: 10 });
    expect(items[0].errors[0].message).toBe('badbyte');
  });

  it('overlaps claims while a slow store answers, never running more than `concurrency`', async () => {
    const store = new MemoryOutboxStore();
    const realClaim = store.claim.bind(store);
    let claimsInFlight = 0;
    let peakClaims = 0;
    jest.spyOn(store, 'claim').mockImplementation(async (req) => {
      claimsInFlight++;
      peakClaims = Math.max(peakClaims, claimsInFlight);
      await new Promise((r) => setTimeout(r, 30)); // a slow round trip
      try {
        return await realClaim(req);
      } finally {
        claimsInFlight--;
      }
    });
    let running = 0;
    let peak = 0;
    let done = 0;
    @Injectable()
    class Varied {
      @OutboxHandler('varied')
      async handle(event: OutboxEvent<{ i: number }>) {
        running++;
        peak = Math.max(peak, running);
        await new Promise((r) => setTimeout(r, 5 + (event.payload.i % 7) * 10));
        running--;
        done++;
      }
    }
    t = await createOutboxApp([Varied], {
      store,
      dispatcher: { concurrency: 4, batchSize: 4, pollInterval: 60_000 },
    });
    await t.outbox.append(
      Array.from({ length: 60 }, (_, i) => ({ type: 'varied', payload: { i } })),
    );
    await tick(60_000);
    for (let i = 0; i < 200 && done < 60; i++) await tick(20);
    expect(done).toBe(60);
    expect(peak).toBeLessThanOrEqual(4);
    // Up to three claims overlap (free slots plus up to two batches claimed ahead).
    expect(peakClaims).toBe(3);
    // Let the last (fake-timed) claims answer before the app closes.
    t.dispatcher.pause();
    await tick(100);
  });

  it('coalesces the acks of handlers finishing together into one ackMany call', async () => {
    const store = new MemoryOutboxStore();
    const ackMany = jest.spyOn(store, 'ackMany');
    const ack = jest.spyOn(store, 'ack');
    @Injectable()
    class Quick {
      @OutboxHandler('coalesce')
      handle() {}
    }
    t = await createOutboxApp([Quick], { store, dispatcher: { concurrency: 5, batchSize: 5 } });
    await t.outbox.append(
      Array.from({ length: 5 }, (_, i) => ({ type: 'coalesce', payload: { i } })),
    );
    await tick(150);
    expect(t.dispatcher.stats().succeeded).toBe(5);
    expect(ackMany).toHaveBeenCalledTimes(1);
    expect(ackMany.mock.calls[0][0]).toHaveLength(5);
    expect(ack).not.toHaveBeenCalled();
  });

  it('acks one by one with a store that has no ackMany', async () => {
    const store = new MemoryOutboxStore();
    Object.defineProperty(store, 'ackMany', { value: undefined });
    let handled = 0;
    @Injectable()
    class Plain {
      @OutboxHandler('plain')
      handle() {
        handled++;
      }
    }
    t = await createOutboxApp([Plain], { store });
    await t.outbox.append([
      { type: 'plain', payload: {} },
      { type: 'plain', payload: {} },
    ]);
    await tick(150);
    expect(handled).toBe(2);
    expect(await store.stats()).toMatchObject({ pending: 0, leased: 0 });
  });

  it('claims events committed in this process at once, without waiting for the poll interval', async () => {
    let done = 0;
    @Injectable()
    class Eager {
      @OutboxHandler('eager')
      handle() {
        done++;
      }
    }
    t = await createOutboxApp([Eager], { dispatcher: { pollInterval: 60_000 } });
    await tick(0);
    await t.outbox.append({ type: 'eager', payload: {} });
    await tick(0);
    expect(done).toBe(1);
  });

  it('keeps retention at pace with the append rate: one cleanup run repeats full batches until nothing eligible is left', async () => {
    @Injectable()
    class Quick {
      @OutboxHandler('many')
      ok() {}
    }
    const store = new MemoryOutboxStore();
    const cleanup = jest.spyOn(store, 'cleanup');
    t = await createOutboxApp([Quick], {
      store,
      module: {
        retention: {
          deliveredMs: 1_000,
          deadLetterMs: null,
          cleanupIntervalMs: 5_000,
          batchSize: 50,
        },
      },
    });
    // 1,200 events between two runs: 24 batches' worth, where one batch per run used to be all.
    for (let i = 0; i < 1_200; i += 300) {
      await t.outbox.append(
        Array.from({ length: 300 }, (_, j) => ({ type: 'many', payload: { i: i + j } })),
      );
    }
    await t.dispatcher.drain();
    await tick(5_000);
    for (let i = 0; i < 30 && cleanup.mock.calls.length < 25; i++) await tick(0);
    expect(cleanup.mock.calls.length).toBe(25); // 24 full batches, then one that is not
    const left = await store.cleanup({
      deliveredRetentionMs: 0,
      deadLetterRetentionMs: null,
      batchSize: 10_000,
    });
    expect(left.events).toBe(0);
  });

  it('runs the retention cleanup on its interval: delivered events and old dead letters go', async () => {
    @Injectable()
    class Mixed {
      @OutboxHandler('kept.short')
      ok() {}
      @OutboxHandler('fails.once', { maxAttempts: 1 })
      fail() {
        throw new Error('no');
      }
    }
    t = await createOutboxApp([Mixed], {
      module: { retention: { deliveredMs: 1_000, deadLetterMs: 2_000, cleanupIntervalMs: 5_000 } },
    });
    const delivered = await t.outbox.append({ type: 'kept.short', payload: { v: 1 } });
    await t.outbox.append({ type: 'fails.once', payload: {} });
    await tick(300);
    expect((await t.store.stats()).dead).toBe(1);
    await tick(5_000);
    expect((await t.store.stats()).dead).toBe(0);
    // The delivered event is gone too: its id is free again, even with other content.
    await expect(
      t.outbox.append({ id: delivered.id, type: 'kept.short', payload: { v: 2 } }),
    ).resolves.toMatchObject({ id: delivered.id });
  });
});
