import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import fc from 'fast-check';
import Redis from 'ioredis';
import {
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxService,
  OutboxStore,
  OutboxStoreOptions,
  OutboxValidationError,
  OUTBOX_STORE,
} from 'nestjs-outbox';
import { DataSource } from 'typeorm';
import {
  connect,
  dropPrefix,
  uniquePrefix as redisPrefix,
} from './stores/redis/redis-test-support';
import {
  openDataSource,
  storeFor,
  TestDialect,
  uniquePrefix,
} from './stores/typeorm/typeorm-test-helpers';
import { describeWithService } from './support/services';

/**
 * Property-based tests of `OutboxService.append` on every store (docs/guarantees.md, Limits; Guarantees 15):
 * random events with unicode, deep nesting, large numbers, prototype keys, ids, dates as `Date`,
 * ISO text or garbage, `null`/`undefined`/wrong types. An accepted event round-trips exactly
 * (what `append` returns is what the handler receives, and what the input said, JSON-normalized);
 * a refused one throws `OutboxValidationError` naming its field, and the store is unchanged (the
 * whole batch: all or nothing).
 *
 * Seeded and bounded (`FUZZ_RUNS` per store, default 100); explore with `FUZZ_SEED=<n>`.
 */

const RUNS = Number(process.env.FUZZ_RUNS ?? 100);
const SEED = Number(process.env.FUZZ_SEED ?? 20261201);
const TYPES = ['fz.a', 'Fz:b-1_2', 'fz.' + 'x'.repeat(252)];

@Injectable()
class Recorder {
  readonly received = new Map<string, OutboxEvent>();

  @OutboxHandler(TYPES)
  handle(event: OutboxEvent): void {
    this.received.set(event.id, event);
  }
}

// Values: well-formed and not.
const unicode = fc.string({ unit: 'binary', maxLength: 30 });
const wellFormed = fc.string({ unit: 'grapheme', maxLength: 30 });
const hugeNumber = fc.constantFrom(1e308, -1e308, Number.MAX_SAFE_INTEGER + 2, -0, 5e-324, 1e21);
const dangerousKey = fc.constantFrom('__proto__', 'constructor', 'prototype', 'toString');
const json: fc.Arbitrary<unknown> = fc.oneof(
  { depthSize: 'small' },
  fc.jsonValue({ maxDepth: 4 }),
  hugeNumber,
  unicode,
  fc.dictionary(fc.oneof(dangerousKey, wellFormed), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }),
  // Deep nesting, well under JSON.stringify's stack limit.
  fc.integer({ min: 50, max: 500 }).map((depth) => {
    let v: unknown = 'bottom';
    for (let i = 0; i < depth; i++) v = i % 2 ? [v] : { d: v };
    return v;
  }),
  fc.constant(JSON.parse('{"__proto__":{"polluted":true},"a":[{"__proto__":1}]}')),
);
const pastDate = fc.date({
  min: new Date('1970-01-01T00:00:00Z'),
  max: new Date('2026-01-01T00:00:00Z'),
  noInvalidDate: true,
});
const date = fc.oneof(
  pastDate,
  pastDate.map((d) => d.toISOString()),
  fc.constantFrom('2025-06-01T12:00:00+02:00', '2025-06-01', '2025-06-01T00:00:00.123456Z'),
  fc.constantFrom('1000-01-01T00:00:00.000Z', '1969-12-31T23:59:59.999Z', new Date(-1)),
);
const headerName = fc.oneof(
  fc.constantFrom('traceparent', 'x-tenant', '__proto__', 'constructor', 'Ünï 🚀', 'a b'),
  fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 20 }),
);
const headers = fc.dictionary(headerName, wellFormed, { maxKeys: 5 });

/** Events `append` must accept: due now or in the past, so a drain delivers them. */
const validEvent = fc.record(
  {
    id: fc.oneof(
      fc.uuid({ version: 4 }),
      fc.uuid({ version: 7 }).map((u) => u.toUpperCase()),
    ),
    type: fc.constantFrom(...TYPES),
    payload: json,
    key: fc.oneof(
      fc.constant(null),
      fc.constantFrom('k1', 'a', 'a ', ' a', 'ünï 🚀', 'x'.repeat(512), 'K1'),
    ),
    headers,
    occurredAt: date,
    availableAt: fc.oneof(fc.constant(null), date),
  },
  { requiredKeys: ['type', 'payload'] },
);

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

type Field = 'id' | 'type' | 'key' | 'payload' | 'headers' | 'occurredAt' | 'availableAt';
const circular: Record<string, unknown> = {};
circular.self = circular;

/** One field made invalid: what it is set to, per field. */
const invalidValues: Record<Field, fc.Arbitrary<unknown>> = {
  id: fc.constantFrom(
    'not-a-uuid',
    '',
    123,
    {},
    '00000000-0000-0000-0000-000000000000',
    `${randomUUID()} `,
    null,
  ),
  type: fc.oneof(
    fc.constantFrom('', 'a b', 'x'.repeat(256), null, undefined, 5, 'ü', 'fz.a\n', ['fz.a']),
    unicode.filter((s) => !/^[A-Za-z0-9._:-]{1,255}$/.test(s)),
  ),
  key: fc.constantFrom('', 'x'.repeat(513), 'a\nb', 'a\u0000', 5, {}, ['k1'], true),
  payload: fc.constantFrom(undefined, () => 1, Symbol('s'), 10n, circular, 'x'.repeat(1024 * 1024)),
  headers: fc.constantFrom(
    [],
    'x',
    5,
    { a: 5 },
    { a: null },
    { ['x'.repeat(129)]: 'v' },
    { '': 'v' },
    Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`h${i}`, 'v'])),
    { a: 'x'.repeat(1025) },
  ),
  occurredAt: fc.constantFrom(
    'yesterday',
    '',
    new Date(NaN),
    12345,
    {},
    true,
    '2026-02-30T00:00:00Z',
  ),
  availableAt: fc.constantFrom(
    'yesterday',
    ' ',
    new Date(NaN),
    0,
    [],
    false,
    'NaN',
    '+275760-09-13T00:00:00.000Z',
    new Date(-8.64e15),
    '0001-01-01T00:00:00Z',
  ),
};

const invalidEvent = fc
  .tuple(validEvent, fc.constantFrom(...(Object.keys(invalidValues) as Field[])))
  .chain(([event, field]) =>
    invalidValues[field].map((value) => ({
      input: { ...event, [field]: value } as Record<string, unknown>,
      field: field as Field | '',
    })),
  );

/** Anything at all in an event's place, accepted or not. */
const garbage = fc.oneof(
  fc.constantFrom(null, undefined, 'event', 5, [], [{ type: 'fz.a', payload: 1 }]),
  fc.record(
    {
      id: fc.oneof(fc.uuid(), unicode, json),
      type: fc.oneof(fc.constantFrom(...TYPES), unicode, json),
      payload: json,
      key: fc.oneof(
        unicode.map((s) => `g:${s}`),
        json,
      ),
      headers: fc.oneof(headers, json),
      occurredAt: fc.oneof(date, json, fc.date()),
      availableAt: fc.oneof(pastDate, json),
    },
    { requiredKeys: [] },
  ),
);

type Case =
  | { kind: 'valid'; input: Record<string, unknown> }
  | { kind: 'invalid'; input: Record<string, unknown>; field: string }
  | { kind: 'any'; input: unknown };

const caseArb: fc.Arbitrary<Case> = fc.oneof(
  { weight: 4, arbitrary: validEvent.map((input) => ({ kind: 'valid' as const, input })) },
  {
    weight: 3,
    arbitrary: invalidEvent.map(({ input, field }) => ({ kind: 'invalid' as const, input, field })),
  },
  { weight: 2, arbitrary: garbage.map((input) => ({ kind: 'any' as const, input })) },
);

/** What an accepted input must come back as (JSON-normalized, dates as instants). */
function expectedOf(input: Record<string, unknown>): Partial<OutboxEvent> {
  const at = (v: unknown) => (v === undefined || v === null ? undefined : new Date(v as string));
  return {
    ...(input.id !== undefined ? { id: String(input.id).toLowerCase() } : {}),
    type: input.type as string,
    payload: JSON.parse(JSON.stringify(input.payload)),
    key: (input.key as string | null | undefined) ?? null,
    headers: JSON.parse(JSON.stringify(input.headers ?? {})),
    ...(at(input.occurredAt) ? { occurredAt: at(input.occurredAt) } : {}),
    ...(at(input.availableAt) ? { availableAt: at(input.availableAt) } : {}),
  };
}

/** JSON with every object's own keys sorted, `__proto__` and `constructor` included. */
function canonical(value: unknown): string {
  const sort = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(sort)
      : v !== null && typeof v === 'object'
        ? Object.keys(v)
            .sort()
            .map((k) => [k, sort((v as Record<string, unknown>)[k])])
        : v;
  return JSON.stringify(sort(value));
}

interface Harness {
  outbox: OutboxService;
  store: OutboxStore;
  dispatcher: OutboxDispatcher;
  recorder: Recorder;
  close(): Promise<void>;
}

async function harness(store: OutboxStoreOptions): Promise<Harness> {
  const moduleRef = await Test.createTestingModule({
    imports: [
      OutboxModule.forRoot({
        store,
        dispatcher: { enabled: false, batchSize: 100, concurrency: 10 },
      }),
    ],
    providers: [Recorder],
  }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  await app.init();
  return {
    outbox: app.get(OutboxService),
    store: app.get<OutboxStore>(OUTBOX_STORE),
    dispatcher: app.get(OutboxDispatcher),
    recorder: app.get(Recorder),
    close: () => app.close(),
  };
}

async function counts(store: OutboxStore): Promise<unknown> {
  const { pending, leased, dead, byType } = await store.stats();
  return { pending, leased, dead, byType };
}

function describeAppendFuzz(store: () => Promise<OutboxStoreOptions>): void {
  let t: Harness;
  beforeAll(async () => {
    t = await harness(await store());
  });
  afterAll(async () => {
    await t?.close();
  });

  it('accepted events round-trip exactly; refused ones name the field and write nothing', async () => {
    const seen = { valid: 0, invalid: 0, anyAccepted: 0, anyRefused: 0, delivered: 0 };
    await fc.assert(
      fc.asyncProperty(
        fc.array(caseArb, { minLength: 1, maxLength: 3 }),
        fc.boolean(),
        async (cases, asList) => {
          // Ids are unique per run, so idempotent appends of earlier runs never interfere.
          for (const c of cases) {
            if (
              (c.kind === 'valid' || (c.kind === 'invalid' && c.field !== 'id')) &&
              typeof c.input.id === 'string'
            ) {
              c.input.id = randomUUID();
            }
          }
          const single = cases.length === 1 && !asList;
          const input = single ? cases[0].input : cases.map((c) => c.input);
          const path = (i: number) => (single ? 'event' : `events[${i}]`);
          const firstInvalid = cases.findIndex((c) => c.kind === 'invalid');
          const before = await counts(t.store);
          let stored: OutboxEvent[];
          try {
            const result: unknown = await t.outbox.append(input as never);
            stored = single ? [result as OutboxEvent] : (result as OutboxEvent[]);
          } catch (error) {
            if (!(error instanceof OutboxValidationError)) throw error;
            expect(await counts(t.store)).toEqual(before);
            // The first refused event is the one named: an expected one, or a garbage one.
            const named =
              firstInvalid >= 0 ? firstInvalid : cases.findIndex((c) => c.kind === 'any');
            expect(named).toBeGreaterThanOrEqual(0);
            const c = cases[named];
            if (c.kind === 'invalid' && cases.slice(0, named).every((p) => p.kind !== 'any')) {
              expect(`${error.field}: ${error.reason}`).toMatch(
                new RegExp(`^${escape(`${path(named)}.${c.field}`)}\\b`),
              );
              seen.invalid++;
            } else {
              expect(error.field).toMatch(/^events?\b/);
              seen.anyRefused++;
            }
            return;
          }
          expect(firstInvalid).toBe(-1);
          expect(stored).toHaveLength(cases.length);
          await t.dispatcher.drain();
          for (const [i, c] of cases.entries()) {
            const input = c.input as Record<string, unknown>;
            if (c.kind === 'valid') {
              const expected = expectedOf(input);
              expect(stored[i]).toMatchObject(expected);
              // Exactly: no key added or lost at any depth (key order aside: jsonb sorts keys).
              expect(canonical([stored[i].payload, stored[i].headers])).toBe(
                canonical([expected.payload, expected.headers]),
              );
              seen.valid++;
            } else seen.anyAccepted++;
            if (!TYPES.includes(stored[i].type) || stored[i].availableAt.getTime() > Date.now())
              continue;
            // What the handler received is what append returned.
            expect(t.recorder.received.get(stored[i].id)).toEqual(stored[i]);
            seen.delivered++;
          }
        },
      ),
      { seed: SEED, numRuns: RUNS, endOnFailure: true },
    );
    expect(seen.valid).toBeGreaterThan(0);
    expect(seen.invalid).toBeGreaterThan(0);
    expect(seen.delivered).toBeGreaterThan(0);
  });

  it('refuses NUL and lone UTF-16 surrogates in keys and headers, naming the field; payload strings round-trip', async () => {
    const before = await counts(t.store);
    // Drivers turn a lone surrogate into U+FFFD (or drop it): two distinct keys would become one.
    const refused: [Record<string, unknown>, string][] = [
      [{ key: 'order-1\ud800' }, 'events[1].key'],
      [{ key: '\udc00order-1' }, 'events[1].key'],
      [{ key: 'a\u0000' }, 'events[1].key'],
      [{ headers: { 'x-\u0000': 'v' } }, 'events[1].headers'],
      [{ headers: { 'x-\ud83d': 'v' } }, 'events[1].headers'],
      [{ headers: { h: 'v\u0000w' } }, 'events[1].headers.h'],
      [{ headers: { h: '\udfff' } }, 'events[1].headers.h'],
    ];
    for (const [fields, field] of refused) {
      const error: unknown = await t.outbox
        .append([
          { type: 'fz.a', payload: 1 },
          { type: 'fz.a', payload: 1, ...fields },
        ])
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect((error as OutboxValidationError).field).toBe(field);
      expect((error as OutboxValidationError).reason).toMatch(/NUL|lone UTF-16 surrogate/);
    }
    expect(await counts(t.store)).toEqual(before);

    const payload = {
      'k\u0000': 'v\u0000',
      lone: ['\ud800', 'x\udfffy', '\udc00\ud800'],
      '\udbff': { pair: '\ud83d\ude80', nul: '\u0000', escaped: '\\u0000 \\ud800' },
    };
    const stored = await t.outbox.append({
      type: 'fz.a',
      payload,
      key: 'order-1 🚀',
      headers: { h: '🚀 ünï' },
    });
    expect(stored.payload).toEqual(payload);
    await t.dispatcher.drain();
    expect(t.recorder.received.get(stored.id)).toMatchObject({
      payload,
      key: 'order-1 🚀',
      headers: { h: '🚀 ünï' },
    });
  });
}

describe('OutboxService.append fuzz [memory store]', () => {
  describeAppendFuzz(async () => ({ type: 'memory' }));
});

function typeorm(dialect: TestDialect): void {
  let dataSource: DataSource;
  let tables: Awaited<ReturnType<typeof storeFor>>;
  const tablePrefix = uniquePrefix('afz');
  afterAll(async () => {
    await tables?.drop();
    await dataSource?.destroy();
  });
  describeAppendFuzz(async () => {
    dataSource = await openDataSource(dialect);
    tables = await storeFor(dataSource, tablePrefix);
    return { type: 'typeorm', dataSource, tablePrefix };
  });
}

describe('OutboxService.append fuzz [typeorm store] [sqlite]', () => typeorm('sqlite'));
describeWithService('postgres', 'OutboxService.append fuzz [typeorm store]', () =>
  typeorm('postgres'),
);
describeWithService('mariadb', 'OutboxService.append fuzz [typeorm store]', () =>
  typeorm('mariadb'),
);
describeWithService('redis', 'OutboxService.append fuzz [redis store]', () => {
  let client: Redis;
  const prefix = redisPrefix('append-fuzz');
  afterAll(async () => {
    await dropPrefix(client, prefix);
    client.disconnect();
  });
  describeAppendFuzz(async () => {
    client = connect();
    return { type: 'redis', client, prefix };
  });
});
