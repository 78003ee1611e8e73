import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, jest } from '@jest/globals';
import type {
  AppendableEvent,
  ClaimedDelivery,
  HandlerSubscription,
  OutboxStore,
} from '../../interfaces/outbox-store.interface';

/** What a contract-suite factory returns for each test: a fresh, empty store. */
export interface OutboxStoreContractContext {
  store: OutboxStore;
  /**
   * Lets store time pass. Stores with an injectable clock move it; stores that read a server clock
   * leave this out and the suite sleeps (it keeps such waits short).
   */
  advance?: (ms: number) => Promise<void>;
  /** Called after each test (close connections, drop data). */
  teardown?: () => Promise<void>;
}

export interface OutboxStoreContractOptions {
  /**
   * Lease length of the tests that wait for a lease to expire; keep it short for real-clock
   * stores. Every other claim of the suite takes a 60 s lease, so a slow machine (a claim and
   * the outcome that follows it more than `leaseMs` apart) does not fail a test about something
   * else. The tests that check something is not due yet schedule it `leaseMs` ahead, at least
   * 1 s on a real clock. @default 400
   */
  leaseMs?: number;
  /** Claimers racing in the concurrency test. @default 8 */
  concurrentClaimers?: number;
  /** Events in the concurrency test. @default 400 */
  concurrentEvents?: number;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export const HOUR = 3_600_000;

/**
 * Runs `fn` with the application clock (`Date.now`, `new Date()`) moved by `offsetMs` and still
 * ticking. Only `Date` is faked: timers, `nextTick` and the like stay real, so drivers work.
 */
export async function withAppClock<T>(offsetMs: number, fn: () => Promise<T>): Promise<T> {
  jest.useFakeTimers({
    now: Date.now() + offsetMs,
    advanceTimers: true,
    doNotFake: [
      'hrtime',
      'nextTick',
      'performance',
      'queueMicrotask',
      'requestAnimationFrame',
      'cancelAnimationFrame',
      'requestIdleCallback',
      'cancelIdleCallback',
      'setImmediate',
      'clearImmediate',
      'setInterval',
      'clearInterval',
      'setTimeout',
      'clearTimeout',
    ],
  });
  try {
    return await fn();
  } finally {
    jest.useRealTimers();
  }
}

/** Runs `fn` over `items` with at most `width` calls in flight. */
export async function inParallel<T>(items: T[], width: number, fn: (item: T) => Promise<unknown>) {
  for (let i = 0; i < items.length; i += width)
    await Promise.all(items.slice(i, i + width).map(fn));
}

/**
 * What every part of the contract shares: the store of the running test (a fresh one per test,
 * from the factory) and the helpers the tests write events, claims and errors with.
 */
export interface ContractKit {
  /** The running test's store and context (set before each test). */
  readonly store: OutboxStore;
  readonly ctx: OutboxStoreContractContext;
  readonly options: OutboxStoreContractOptions;
  readonly leaseMs: number;
  /** Lets store time pass: the context's clock, or a real sleep. */
  advance(ms: number): Promise<unknown>;
  /**
   * How far ahead the "not due yet" tests schedule: `leaseMs` on the context's clock, at least
   * 1 s on a real one.
   */
  readonly aheadMs: number;
  /**
   * Runs `check`, which asserts that what was scheduled `aheadMs` after `since` (a
   * `performance.now()` read before the scheduling call) is not due yet. On a real clock, when
   * half of `aheadMs` has passed before the check starts (a loaded machine), the due time could
   * pass while it runs: the check is left out rather than failed by the load.
   */
  notYet(since: number, check: () => Promise<void>): Promise<void>;
  /** Handler A takes `t.one` and `t.two`; B takes `t.one`. */
  readonly A: HandlerSubscription;
  readonly B: HandlerSubscription;
  /** An event of type `t.one` for A and B, with `overrides`. */
  event(overrides?: Partial<AppendableEvent>): AppendableEvent;
  /** Claims with a 60 s lease unless `lease` says otherwise (expiry tests pass `leaseMs`). */
  claim(
    handlers: HandlerSubscription[],
    limit?: number,
    workerId?: string,
    lease?: number,
  ): Promise<ClaimedDelivery[]>;
  /** A delivery error of `attempt` by worker w1. */
  err(
    attempt: number,
    message?: string,
  ): { name: string; message: string; attempt: number; workerId: string };
  ackAll(claimed: ClaimedDelivery[]): Promise<void>;
  /** Appends an event for one handler and fails it twice: dead-lettered `exhausted`. */
  makeDead(
    overrides?: Partial<AppendableEvent>,
    handler?: HandlerSubscription,
  ): Promise<{ event: AppendableEvent; deliveryId: string }>;
}

/** The lease of a claim that no test expects to expire. */
const HELD_MS = 60_000;

/** Registers the per-test store (before and after each test) and returns the shared helpers. */
export function contractKit(
  factory: () => Promise<OutboxStoreContractContext>,
  options: OutboxStoreContractOptions,
): ContractKit {
  let ctx: OutboxStoreContractContext | undefined;
  beforeEach(async () => {
    ctx = await factory();
  });
  afterEach(async () => {
    await ctx?.teardown?.();
  });
  const leaseMs = options.leaseMs ?? 400;
  const A: HandlerSubscription = { name: 'A.handle', types: ['t.one', 't.two'] };
  const B: HandlerSubscription = { name: 'B.handle', types: ['t.one'] };
  const kit: ContractKit = {
    get store() {
      return kit.ctx.store;
    },
    get ctx() {
      if (!ctx) throw new Error('the contract store exists only inside a test');
      return ctx;
    },
    options,
    leaseMs,
    advance: (ms) => (kit.ctx.advance ? kit.ctx.advance(ms) : sleep(ms)),
    get aheadMs() {
      return kit.ctx.advance ? leaseMs : Math.max(leaseMs, 1_000);
    },
    async notYet(since, check) {
      if (!kit.ctx.advance && performance.now() - since >= kit.aheadMs / 2) return;
      await check();
    },
    A,
    B,
    event: (overrides = {}) => ({
      id: randomUUID(),
      type: 't.one',
      payload: { n: 1 },
      key: null,
      headers: {},
      occurredAt: new Date('2026-01-01T00:00:00.000Z'),
      availableAt: null,
      handlers: ['A.handle', 'B.handle'],
      ...overrides,
    }),
    claim: (handlers, limit = 100, workerId = 'w1', lease = HELD_MS) =>
      kit.store.claim({ workerId, handlers, limit, leaseMs: lease }),
    err: (attempt, message = 'boom') => ({ name: 'Error', message, attempt, workerId: 'w1' }),
    async ackAll(claimed) {
      for (const c of claimed) await kit.store.ack(c.lease);
    },
    async makeDead(overrides = {}, handler = A) {
      const e = kit.event({ handlers: [handler.name], ...overrides });
      await kit.store.append([e]);
      const [c] = await kit.claim([handler]);
      await kit.store.retry(c.lease, 0, kit.err(1, 'first failure'));
      const [c2] = await kit.claim([handler]);
      await kit.store.deadLetter(c2.lease, 'exhausted', kit.err(2, 'order 42 not found'));
      return { event: e, deliveryId: c.id };
    },
  };
  return kit;
}
