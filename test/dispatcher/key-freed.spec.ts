import { Injectable } from '@nestjs/common';
import {
  Lease,
  MemoryOutboxStore,
  NonRetryableError,
  OutboxEvent,
  OutboxHandler,
} from 'nestjs-outbox';
import { createOutboxApp, deferred, TestApp, tick as advance } from '../support/outbox-app';

/** Fake time forward, then enough real turns for acks, claims and runs to chain. */
async function tick(ms: number): Promise<void> {
  await advance(ms);
  for (let i = 0; i < 50; i++) await new Promise((r) => setImmediate(r));
}

/**
 * When a written outcome owes the claim loop a claim (`Owed.freed`, claim-loop.ts) and when it
 * does not. The poll tick is a minute, so any claim seen here is one the loop owed itself.
 */
const POLL = 60_000;

type Step = { n: number };

/** Runs of `kf.*` handlers, as `key:n`, in the order they started. */
let ran: string[] = [];
/** The run of `key:n` waits for this gate when set. */
let gates: Map<string, Promise<void>> = new Map();
/** What the run of `key:n` throws, when set. */
let failures: Map<string, () => Error> = new Map();

async function step(event: OutboxEvent<Step>): Promise<void> {
  const id = `${event.key}:${event.payload.n}`;
  ran.push(id);
  await gates.get(id);
  const fail = failures.get(id);
  if (fail) throw fail();
}

@Injectable()
class Steps {
  @OutboxHandler('kf.step', { name: 'KeyFreed.step', maxAttempts: 5 })
  handle(event: OutboxEvent<Step>): Promise<void> {
    return step(event);
  }
}

@Injectable()
class BatchSteps {
  @OutboxHandler('kf.batch', { name: 'KeyFreed.batch', batch: { max: 10 } })
  async handle(events: OutboxEvent<Step>[]): Promise<void> {
    for (const event of events) await step(event);
  }
}

function keyed(key: string, count: number, type = 'kf.step') {
  return Array.from({ length: count }, (_, n) => ({ type, key, payload: { n } }));
}

describe('dispatcher: a written outcome that frees a key (memory store, fake time)', () => {
  let t: TestApp | undefined;
  let store: MemoryOutboxStore;
  /** Claims that reached the store (a refused one included). */
  let claims: number;
  /** When set, every claim fails as an unreachable store's would. */
  let broken: boolean;

  beforeEach(() => {
    jest.useFakeTimers({
      now: new Date('2026-06-01T00:00:00Z'),
      doNotFake: ['nextTick', 'setImmediate'],
    });
    ran = [];
    gates = new Map();
    failures = new Map();
    claims = 0;
    broken = false;
    store = new MemoryOutboxStore();
    const claim = store.claim.bind(store);
    jest.spyOn(store, 'claim').mockImplementation(async (request) => {
      claims++;
      if (broken) throw new Error('connect ECONNREFUSED 127.0.0.1:5432');
      return claim(request);
    });
  });
  afterEach(async () => {
    await t?.app.close();
    t = undefined;
    jest.useRealTimers();
  });

  async function open(providers: unknown[] = [Steps], dispatcher = {}): Promise<TestApp> {
    t = await createOutboxApp(providers as never[], {
      store,
      dispatcher: { pollInterval: POLL, ...dispatcher },
    });
    return t;
  }

  it("claims a key's next event as soon as its elder's ack is written, then nothing more", async () => {
    const app = await open();
    await app.outbox.append(keyed('a', 3));
    await tick(50);
    expect(ran).toEqual(['a:0', 'a:1', 'a:2']);
    const idle = claims;
    await tick(5_000);
    expect(claims).toBe(idle);
  });

  it('claims for a key freed while the store is failing only when the claim backoff ends', async () => {
    const gate = deferred();
    gates.set('a:0', gate.promise);
    const app = await open([Steps], {
      storeErrorBackoffMs: 10_000,
      storeErrorMaxBackoffMs: 10_000,
    });
    await app.outbox.append(keyed('a', 2));
    await tick(10);
    expect(ran).toEqual(['a:0']);
    // The store goes down: the claim woken by the next commit fails and backs the loop off.
    broken = true;
    await app.outbox.append({ type: 'kf.step', payload: { n: 9 } });
    await tick(10);
    expect(app.dispatcher.stats().storeErrors).toBe(1);
    const failed = claims;
    // a:0's ack is written (acks do not go through claim): its key is freed, but the loop is
    // backing off and claims nothing until the backoff ends.
    gate.resolve();
    await tick(0);
    await tick(1_000);
    expect(app.dispatcher.stats().succeeded).toBe(1);
    expect(claims).toBe(failed);
    await tick(5_000);
    expect(claims).toBe(failed);
    expect(ran).toEqual(['a:0']);
    // Back up: what was owed is claimed when the backoff ends, not on the next poll tick
    // (a minute away).
    broken = false;
    await tick(4_100);
    expect(ran).toEqual(['a:0', 'a:1', 'null:9']);
  });

  it('claims an event committed while the store is failing when the claim backoff ends', async () => {
    const app = await open([Steps], {
      storeErrorBackoffMs: 10_000,
      storeErrorMaxBackoffMs: 10_000,
    });
    broken = true;
    await app.outbox.append({ type: 'kf.step', payload: { n: 1 } });
    await tick(10);
    expect(app.dispatcher.stats().storeErrors).toBe(1);
    // Committed during the backoff: its wake-up waits for the backoff, not for the poll tick.
    await app.outbox.append({ type: 'kf.step', payload: { n: 2 } });
    await tick(1_000);
    broken = false;
    await tick(5_000);
    expect(ran).toEqual([]);
    await tick(4_100);
    expect(ran).toEqual(['null:1', 'null:2']);
  });

  it.each([
    ['batched acks (ackMany)', true],
    ['one ack per call (no ackMany)', false],
  ])('owes no claim for an ack refused as fenced (%s)', async (_title, batched) => {
    if (batched) {
      const ackMany = store.ackMany.bind(store);
      // The store refuses the ack: the lease was taken over meanwhile (another token).
      jest
        .spyOn(store, 'ackMany')
        .mockImplementation((leases: Lease[]) =>
          ackMany(leases.map((l) => ({ ...l, token: `${l.token}-stale` }))),
        );
    } else {
      (store as { ackMany?: unknown }).ackMany = undefined;
      const ack = store.ack.bind(store);
      jest
        .spyOn(store, 'ack')
        .mockImplementation((lease: Lease) => ack({ ...lease, token: `${lease.token}-stale` }));
    }
    const gate = deferred();
    gates.set('f:0', gate.promise);
    const app = await open();
    await app.outbox.append(keyed('f', 2));
    await tick(10);
    expect(ran).toEqual(['f:0']);
    const before = claims;
    gate.resolve();
    await tick(0);
    expect(app.dispatcher.stats()).toMatchObject({ leaseLost: 1, succeeded: 0 });
    await tick(5_000);
    expect(claims).toBe(before);
  });

  it('owes no claim for a retry (its delivery keeps the key), one for a dead letter', async () => {
    failures.set('r:0', () => new Error('try again'));
    const gate = deferred();
    gates.set('r:0', gate.promise);
    const app = await open();
    await app.outbox.append(keyed('r', 2));
    await tick(10);
    const before = claims;
    gate.resolve();
    await tick(0);
    expect(app.dispatcher.stats()).toMatchObject({ retried: 1 });
    await tick(5_000);
    expect(claims).toBe(before);
    expect(ran).toEqual(['r:0']);
    // The poll tick claims the retry, which now fails for good: its dead letter frees the key,
    // and r:1 is claimed at once, not a poll later.
    failures.set('r:0', () => new NonRetryableError('no'));
    await tick(POLL - 5_000);
    await tick(50);
    expect(app.dispatcher.stats()).toMatchObject({ deadLettered: 1, succeeded: 1 });
    expect(ran).toEqual(['r:0', 'r:0', 'r:1']);
    const idle = claims;
    await tick(5_000);
    expect(claims).toBe(idle);
  });

  it('claims nothing for a key freed while paused, and claims it on resume', async () => {
    const gate = deferred();
    gates.set('p:0', gate.promise);
    const app = await open();
    await app.outbox.append(keyed('p', 2));
    await tick(10);
    app.dispatcher.pause();
    const paused = claims;
    gate.resolve();
    await tick(0);
    await tick(5_000);
    expect(app.dispatcher.stats().succeeded).toBe(1);
    expect(claims).toBe(paused);
    expect(ran).toEqual(['p:0']);
    app.dispatcher.resume();
    await tick(10);
    expect(ran).toEqual(['p:0', 'p:1']);
  });

  it('claims nothing for a key freed during shutdown', async () => {
    const gate = deferred();
    gates.set('s:0', gate.promise);
    const app = await open();
    await app.outbox.append(keyed('s', 2));
    await tick(10);
    const before = claims;
    const closing = app.app.close();
    await tick(10);
    gate.resolve();
    await tick(10);
    await closing;
    t = undefined;
    await tick(5_000);
    expect(claims).toBe(before);
    expect(ran).toEqual(['s:0']);
    expect(await store.stats()).toMatchObject({ pending: 1, leased: 0 });
  });

  it("frees the keys of a batch handler's acks: a keyed backlog drains without the poll tick", async () => {
    const app = await open([BatchSteps]);
    await app.outbox.append(['x', 'y', 'z'].flatMap((key) => keyed(key, 4, 'kf.batch')));
    await tick(100);
    expect(ran).toHaveLength(12);
    for (const key of ['x', 'y', 'z']) {
      expect(ran.filter((r) => r.startsWith(`${key}:`))).toEqual(
        [0, 1, 2, 3].map((n) => `${key}:${n}`),
      );
    }
    const idle = claims;
    await tick(5_000);
    expect(claims).toBe(idle);
  });
});
