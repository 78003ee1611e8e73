import { Injectable } from '@nestjs/common';
import {
  DuplicateEventError,
  MemoryOutboxStore,
  OutboxHandler,
  OutboxValidationError,
} from 'nestjs-outbox';
import { createOutboxApp, TestApp } from './support/outbox-app';

describe('OutboxService.append', () => {
  let t: TestApp;
  const store = new MemoryOutboxStore();
  // Backlog counts only: the age of the oldest pending delivery moves with the clock.
  const counts = async () => ({ ...(await store.stats()), oldestPendingAgeMs: 0 });

  @Injectable()
  class Handlers {
    @OutboxHandler('known.type')
    a() {}
    @OutboxHandler('known.type')
    b() {}
  }

  beforeAll(async () => {
    t = await createOutboxApp([Handlers], {
      store,
      dispatcher: { enabled: false },
      module: { limits: { payloadMaxBytes: 2048 } },
    });
  });
  afterAll(() => t.app.close());

  it('returns one event for one input and an array for an array, ids filled', async () => {
    const one = await t.outbox.append({ type: 'known.type', payload: { a: 1 } });
    expect(one.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(one.key).toBeNull();
    expect(one.headers).toEqual({});
    const many = await t.outbox.append([
      { type: 'known.type', payload: 1 },
      { type: 'known.type', payload: 2, key: 'k' },
    ]);
    expect(many).toHaveLength(2);
    expect(await t.outbox.append([])).toEqual([]);
  });

  it('writes one delivery per handler registered for the type', async () => {
    const e = await t.outbox.append({ type: 'known.type', payload: {} });
    const claimed = await store.claim({
      workerId: 'w',
      handlers: [
        { name: 'Handlers.a', types: ['known.type'] },
        { name: 'Handlers.b', types: ['known.type'] },
      ],
      limit: 100,
      leaseMs: 1000,
    });
    expect(
      claimed
        .filter((c) => c.event.id === e.id)
        .map((c) => c.handler)
        .sort(),
    ).toEqual(['Handlers.a', 'Handlers.b']);
  });

  it.each([
    [{ type: '', payload: 1 }, 'event.type'],
    [{ type: 'has space', payload: 1 }, 'event.type'],
    [{ type: 'x'.repeat(256), payload: 1 }, 'event.type'],
    [{ type: 'ok', payload: undefined }, 'event.payload'],
    [{ type: 'ok', payload: 'x'.repeat(3000) }, 'event.payload'],
    [{ type: 'ok', payload: { big: 10n } }, 'event.payload'],
    [{ type: 'ok', payload: 1, key: 'k'.repeat(513) }, 'event.key'],
    [{ type: 'ok', payload: 1, key: 'a\u0000b' }, 'event.key'],
    [{ type: 'ok', payload: 1, key: 'line\nbreak' }, 'event.key'],
    [{ type: 'ok', payload: 1, id: 'not-a-uuid' }, 'event.id'],
    [{ type: 'ok', payload: 1, headers: { a: 5 } }, 'event.headers.a'],
    [
      {
        type: 'ok',
        payload: 1,
        headers: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`h${i}`, 'v'])),
      },
      'event.headers',
    ],
    [{ type: 'ok', payload: 1, headers: { ['n'.repeat(129)]: 'v' } }, 'event.headers'],
    [{ type: 'ok', payload: 1, headers: { a: 'v'.repeat(1025) } }, 'event.headers.a'],
    [{ type: 'ok', payload: 1, availableAt: 'tomorrow' }, 'event.availableAt'],
  ])('rejects %j naming %s and writes nothing', async (input, field) => {
    const before = await counts();
    const error = await t.outbox.append(input as any).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).field).toBe(field);
    expect(await counts()).toEqual(before);
  });

  it('keeps a header named __proto__ (defined, not assigned)', async () => {
    const headers = JSON.parse('{"__proto__":"v","constructor":"c"}') as Record<string, string>;
    const event = await t.outbox.append({ type: 'ok', payload: 1, headers });
    expect(Object.entries(event.headers)).toEqual([
      ['__proto__', 'v'],
      ['constructor', 'c'],
    ]);
    expect(Object.getPrototypeOf(event.headers)).toBe(Object.prototype);
  });

  it.each([
    ['a Map', new Map([['tenant', 't1']]), 'an instance of Map'],
    ['a Date', new Date(), 'an instance of Date'],
    [
      'a class instance',
      new (class Trace {
        traceparent = '00-abc';
      })(),
      'an instance of Trace',
    ],
    ['an object inheriting its fields', Object.create({ tenant: 't1' }), 'prototype'],
  ])(
    'refuses headers given as %s, whose entries would be dropped, naming the field',
    async (_label, headers, reason) => {
      const before = await counts();
      await expect(
        t.outbox.append({ type: 'ok', payload: 1, headers: headers as never }),
      ).rejects.toMatchObject({ field: 'event.headers', reason: expect.stringContaining(reason) });
      expect(await counts()).toEqual(before);
    },
  );

  it('accepts headers as a null-prototype object', async () => {
    const headers = Object.assign(Object.create(null), { tenant: 't1' });
    const event = await t.outbox.append({ type: 'ok', payload: 1, headers });
    expect(event.headers).toEqual({ tenant: 't1' });
  });

  it.each([null, 'manager', 5, [{}]])(
    'refuses options %p with a validation error',
    async (options) => {
      const before = await counts();
      await expect(
        t.outbox.append({ type: 'ok', payload: 1 }, options as never),
      ).rejects.toMatchObject({ field: 'options' });
      expect(await counts()).toEqual(before);
    },
  );

  it.each([
    ['2026-02-30T00:00:00Z', 'expected a Date or an ISO-8601 string'],
    ['March 7, 2026', 'expected a Date or an ISO-8601 string'],
    ['1', 'expected a Date or an ISO-8601 string'],
    ['0999-12-31T23:59:59.999Z', 'outside years 1000–9999'],
    ['+010000-01-01T00:00:00.000Z', 'outside years 1000–9999'],
    [new Date(-8.64e15), 'outside years 1000–9999'],
  ])(
    'refuses occurredAt and availableAt %p, which not every store can hold',
    async (at, reason) => {
      const before = await counts();
      for (const field of ['occurredAt', 'availableAt'] as const) {
        await expect(
          t.outbox.append({ type: 'ok', payload: 1, [field]: at }),
        ).rejects.toMatchObject({
          field: `event.${field}`,
          reason: expect.stringContaining(reason),
        });
      }
      expect(await counts()).toEqual(before);
    },
  );

  it('accepts ISO dates at the ends of the range and leap days', async () => {
    for (const at of ['1000-01-01T00:00:00.000Z', '9999-12-31T23:59:59.999Z', '2024-02-29']) {
      const event = await t.outbox.append({ type: 'ok', payload: 1, occurredAt: at });
      expect(event.occurredAt).toEqual(new Date(at));
    }
  });

  it('names the index of the bad event in a batch and writes none of it', async () => {
    const before = await counts();
    await expect(
      t.outbox.append([
        { type: 'ok', payload: 1 },
        { type: 'bad type', payload: 1 },
      ]),
    ).rejects.toMatchObject({ field: 'events[1].type' });
    expect(await counts()).toEqual(before);
  });

  it('is idempotent per id: same content is a no-op, different content throws', async () => {
    const id = '0b5d2f7e-7a51-4c8e-9a53-2f1a1c7e9d11';
    const first = await t.outbox.append({ id, type: 'known.type', payload: { v: 1 } });
    const before = await counts();
    const again = await t.outbox.append({ id, type: 'known.type', payload: { v: 1 } });
    expect(again.id).toBe(first.id);
    expect(await counts()).toEqual(before);
    await expect(
      t.outbox.append({ id, type: 'known.type', payload: { v: 2 } }),
    ).rejects.toBeInstanceOf(DuplicateEventError);
  });

  it('refuses more events than limits.appendMaxEvents in one call', async () => {
    const events = Array.from({ length: 1001 }, () => ({ type: 'ok', payload: 1 }));
    await expect(t.outbox.append(events)).rejects.toMatchObject({ field: 'events' });
  });

  // A misspelt `manager` would otherwise be ignored: the event committed on its own, published
  // even if the caller's transaction rolled back.
  it('refuses an append option that is not one, naming the closest, and writes nothing', async () => {
    const before = await counts();
    const typo = t.outbox.append({ type: 'known.type', payload: {} }, { mangaer: {} } as never);
    await expect(typo).rejects.toThrow(OutboxValidationError);
    await expect(typo).rejects.toMatchObject({
      field: 'options.mangaer',
      message: 'Invalid options.mangaer: not an option; did you mean options.manager?',
    });
    await expect(
      t.outbox.append({ type: 'known.type', payload: {} }, { transaction: {} } as never),
    ).rejects.toMatchObject({
      field: 'options.transaction',
      message:
        'Invalid options.transaction: not an option; the options here are manager, tx, standalone',
    });
    expect(await counts()).toEqual(before);
  });

  // A misspelt `kye` would otherwise be dropped: the event appended without its key, outside its
  // key's order, without a word.
  it('refuses an event field that is not one, naming the closest, and writes nothing', async () => {
    const before = await counts();
    const typo = t.outbox.append({ type: 'known.type', payload: {}, kye: 'order-1' } as never);
    await expect(typo).rejects.toThrow(OutboxValidationError);
    await expect(typo).rejects.toMatchObject({
      field: 'event.kye',
      message: 'Invalid event.kye: not an event field; did you mean event.key?',
    });
    await expect(
      t.outbox.append([
        { type: 'known.type', payload: 1 },
        { type: 'known.type', payload: 2, aggregateVersion: 3 } as never,
      ]),
    ).rejects.toMatchObject({
      field: 'events[1].aggregateVersion',
      message:
        'Invalid events[1].aggregateVersion: not an event field; the fields are id, type, payload, key, headers, occurredAt, availableAt',
    });
    expect(await counts()).toEqual(before);
  });
});
