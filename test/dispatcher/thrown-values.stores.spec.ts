/*
 * A handler may throw anything (Guarantees 8): whatever it is, the attempt is a failed attempt
 * whose error is recorded, and the delivery ends as a dead letter after its attempts, at once,
 * not after its lease runs out with the thrown value lost ("No outcome reported …").
 */
import { Injectable } from '@nestjs/common';
import { NonRetryableError, OutboxEvent, OutboxHandler } from 'nestjs-outbox';
import { createOutboxApp } from '../support/outbox-app';
import { describeOnStores, OpenedStore } from '../support/store-targets';

const cyclicNullPrototype: Record<string, unknown> = Object.create(null);
cyclicNullPrototype.self = cyclicNullPrototype;
const messageGetterThrows = new Error('unused');
Object.defineProperty(messageGetterThrows, 'message', {
  get() {
    throw new Error('message getter');
  },
});
const nameGetterThrows = new Error('name getter');
Object.defineProperty(nameGetterThrows, 'name', {
  get() {
    throw new Error('name getter');
  },
});
const symbolName = Object.assign(new Error('symbol name'), { name: Symbol('n') });
const unprintableName = Object.assign(new Error('unprintable name'), {
  name: {
    toString() {
      throw new Error('toString');
    },
  },
});
const hostileProxy = new Proxy(
  {},
  {
    get() {
      throw new Error('get trap');
    },
    getPrototypeOf() {
      throw new Error('getPrototypeOf trap');
    },
  },
);
const nonRetryableUnreadable = new NonRetryableError('unused');
Object.defineProperty(nonRetryableUnreadable, 'message', {
  get() {
    throw new Error('message getter');
  },
});

/** What each handler throws, and the error name and message the dead letter records. */
const CASES: Record<string, { thrown: unknown; name: string; message: string }> = {
  string: { thrown: 'plain string', name: 'string', message: 'plain string' },
  null: { thrown: null, name: 'object', message: 'null' },
  undefined: { thrown: undefined, name: 'undefined', message: 'undefined' },
  object: { thrown: { code: 42 }, name: 'object', message: '{"code":42}' },
  bigint: { thrown: 10n, name: 'bigint', message: '10' },
  symbol: { thrown: Symbol('s'), name: 'symbol', message: 'Symbol(s)' },
  cyclicNullPrototype: {
    thrown: cyclicNullPrototype,
    name: 'object',
    message: '[unprintable object]',
  },
  messageGetterThrows: {
    thrown: messageGetterThrows,
    name: 'Error',
    message: '[unreadable message]',
  },
  nameGetterThrows: { thrown: nameGetterThrows, name: 'Error', message: 'name getter' },
  symbolName: { thrown: symbolName, name: 'Symbol(n)', message: 'symbol name' },
  unprintableName: { thrown: unprintableName, name: 'Error', message: 'unprintable name' },
  hostileProxy: { thrown: hostileProxy, name: 'object', message: '[unprintable object]' },
};

@Injectable()
class Thrower {
  readonly calls = new Map<string, number>();

  @OutboxHandler('thrown.value', { maxAttempts: 2 })
  handle(event: OutboxEvent<{ kind: string }>): Promise<void> {
    const { kind } = event.payload;
    this.calls.set(kind, (this.calls.get(kind) ?? 0) + 1);
    return Promise.reject(
      kind === 'nonRetryableUnreadable' ? nonRetryableUnreadable : CASES[kind].thrown,
    );
  }
}

describeOnStores('handlers throwing values that are hard to read', 'thrown', (target) => {
  let opened: OpenedStore;
  beforeAll(async () => {
    opened = await target.open();
  });
  afterAll(() => opened?.close());

  it('each is a failed attempt with its error recorded, then a dead letter at once', async () => {
    const t = await createOutboxApp([Thrower], {
      store: opened.store,
      // A lease far longer than the test: a delivery whose outcome was lost would still be leased.
      dispatcher: { enabled: false, leaseMs: 60_000, backoff: { initialMs: 1, jitter: 0 } },
    });
    try {
      const kinds = [...Object.keys(CASES), 'nonRetryableUnreadable'];
      await t.outbox.append(kinds.map((kind) => ({ type: 'thrown.value', payload: { kind } })));
      for (let round = 0; round < 20; round++) {
        // Bounded: a delivery whose outcome was lost stays leased, and drain would wait for it.
        await t.dispatcher.drain({ maxRounds: 100 });
        const { items } = await t.store.listDeadLetters({ limit: 100 });
        if (items.length === kinds.length) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const { items } = await t.store.listDeadLetters({ limit: 100 });
      const byKind = new Map(items.map((d) => [(d.payload as { kind: string }).kind, d]));
      const calls = Object.fromEntries(t.get(Thrower).calls);
      for (const [kind, expected] of Object.entries(CASES)) {
        expect({ kind, calls: calls[kind] }).toEqual({ kind, calls: 2 });
        const dead = byKind.get(kind);
        expect({ kind, reason: dead?.reason }).toEqual({ kind, reason: 'exhausted' });
        expect(
          dead!.errors.map((e) => ({ kind, name: e.name, message: e.message, attempt: e.attempt })),
        ).toEqual([
          { kind, name: expected.name, message: expected.message, attempt: 1 },
          { kind, name: expected.name, message: expected.message, attempt: 2 },
        ]);
      }
      // A NonRetryableError is still refused at once, however unreadable its message.
      expect(calls.nonRetryableUnreadable).toBe(1);
      expect(byKind.get('nonRetryableUnreadable')?.reason).toBe('rejected');
    } finally {
      await t.app.close();
    }
  }, 60_000);
});
