import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { OutboxStoreStats } from 'nestjs-outbox';
import { Response } from 'supertest';
import { AdminApp, API_KEY, createAdminApp, seed } from './admin-app';
import { AdminStoreHarness } from './admin-api.suite';

/**
 * Property-based tests of the admin HTTP API: random query strings, bodies, cursors, ids and
 * headers, with `null`, huge numbers, unicode, prototype keys, nesting and wrong types. For every
 * request: never a 5xx, no SQL or stack in the body; a 4xx changes nothing; a 2xx replay or purge
 * moved exactly the dead letters its ids or filter select (worked out here from the state before),
 * a filter without criteria only with `all: true`, and it says how many.
 *
 * Seeded and bounded (`FUZZ_RUNS` per route, default 150). A failure prints the seed and the
 * request (no shrinking: a failed run may have changed the store); explore other inputs with
 * `FUZZ_SEED=<n> FUZZ_RUNS=<n>` in the environment.
 */

const RUNS = Number(process.env.FUZZ_RUNS ?? 150);
/** A property sends RUNS requests and checks the store after each: over 30 s on a loaded two-core machine. */
const FUZZ_TIMEOUT_MS = 150_000;
const SEED = Number(process.env.FUZZ_SEED ?? 20261201);
const FILTER_FIELDS = ['type', 'handler', 'key', 'failedBefore', 'failedAfter'] as const;
const LEAK = /"stack"|\n\s+at |SELECT |INSERT INTO|UPDATE |DELETE FROM|QueryFailedError/;

interface Row {
  id: string;
  type: string;
  handler: string;
  key: string | null;
  deadAt: number;
  attempts: number;
}

interface State {
  deadLetters: Row[];
  stats: Pick<OutboxStoreStats, 'pending' | 'leased' | 'dead' | 'byType'>;
}

/** What can change: every dead letter and the counts per status and type. */
async function state(t: AdminApp): Promise<State> {
  const page = await t.store.listDeadLetters({ limit: 1_000 });
  const { pending, leased, dead, byType } = await t.store.stats();
  return {
    deadLetters: page.items
      .map(({ id, type, handler, key, deadAt, attempts }) => ({
        id,
        type,
        handler,
        key,
        deadAt: deadAt.getTime(),
        attempts,
      }))
      .sort((a, b) => (a.id < b.id ? -1 : 1)),
    stats: { pending, leased, dead, byType },
  };
}

/**
 * How many dead letters a bulk body that was answered 2xx must have moved, worked out from the
 * state before it, or why it must not have been accepted at all.
 */
function expectedMoved(before: State, body: Record<string, unknown>): number | string {
  const unknown = [
    ...Object.keys(body).filter((k) => !['ids', 'filter', 'all', 'availableAt'].includes(k)),
    ...(isPlainObject(body.filter)
      ? Object.keys(body.filter).filter((k) => !(FILTER_FIELDS as readonly string[]).includes(k))
      : []),
  ];
  if (unknown.length > 0) return `accepted unknown fields ${unknown.join(', ')}`;
  if (Array.isArray(body.ids)) {
    const ids = new Set(body.ids.map((id) => String(id).toLowerCase()));
    return before.deadLetters.filter((d) => ids.has(d.id)).length;
  }
  const filter = body.filter as Record<string, unknown>;
  const given = FILTER_FIELDS.filter((f) => filter[f] !== undefined);
  if (given.some((f) => typeof filter[f] !== 'string')) return 'accepted a non-string criterion';
  if (given.length === 0 && body.all !== true) return 'matched everything without all: true';
  const at = (f: 'failedBefore' | 'failedAfter') => Date.parse(filter[f] as string);
  return before.deadLetters.filter(
    (d) =>
      (filter.type === undefined || d.type === filter.type) &&
      (filter.handler === undefined || d.handler === filter.handler) &&
      (filter.key === undefined || d.key === filter.key) &&
      (filter.failedBefore === undefined || d.deadAt < at('failedBefore')) &&
      (filter.failedAfter === undefined || d.deadAt >= at('failedAfter')),
  ).length;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Percent-encodes every UTF-8 byte, so any string (lone surrogates too) makes a valid URL. */
const pct = (text: string) =>
  [...Buffer.from(text, 'utf8')].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');

const cursorOf = (text: string) => Buffer.from(text, 'utf8').toString('base64url');

// Values: well-formed and not, valid and not.
const unicode = fc.string({ unit: 'binary', maxLength: 40 });
const hugeNumber = fc.constantFrom(
  1e308,
  -1e308,
  Number.MAX_SAFE_INTEGER + 2,
  -0,
  5e-324,
  2 ** 53,
  1e21,
);
const dateText = fc.oneof(
  fc
    .date({ min: new Date(-8.64e15), max: new Date(8.64e15), noInvalidDate: true })
    .map((d) => d.toISOString()),
  fc.constantFrom(
    '1970-01-01T00:00:00.000Z',
    '9999-12-31T23:59:59.999Z',
    '0001-01-01T00:00:00Z',
    '+275760-09-13T00:00:00.000Z',
    '-005000-01-01T00:00:00.000Z',
    '2026-02-30T00:00:00Z',
    'yesterday',
    '',
  ),
);
const dangerousKey = fc.constantFrom('__proto__', 'constructor', 'prototype', 'toString');
const anyJson: fc.Arbitrary<unknown> = fc.oneof(
  { depthSize: 'small' },
  fc.jsonValue({ maxDepth: 3 }),
  fc.constant(null),
  hugeNumber,
  unicode,
  fc.dictionary(fc.oneof(dangerousKey, unicode), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
);

/** The fixed dead letters of a run, so generated ids and filters can hit real rows. */
interface Known {
  ids: string[];
  cursor: string | null;
}

function filterValue(field: (typeof FILTER_FIELDS)[number]): fc.Arbitrary<unknown> {
  const real =
    field === 'failedBefore' || field === 'failedAfter'
      ? dateText
      : fc.constantFrom('order.placed', 'user.created', 'Billing.onOrder', 'Users.onCreated', 'k1');
  return fc.oneof(real, anyJson, fc.constant(null), fc.constant(''));
}

const filterArb: fc.Arbitrary<unknown> = fc.oneof(
  fc.record(
    Object.fromEntries(FILTER_FIELDS.map((f) => [f, filterValue(f)])) as Record<
      (typeof FILTER_FIELDS)[number],
      fc.Arbitrary<unknown>
    >,
    { requiredKeys: [] },
  ),
  fc.constant({}),
  anyJson,
);

function idArb(known: () => Known): fc.Arbitrary<unknown> {
  return fc.oneof(
    fc.nat().map((i) => known().ids[i % Math.max(known().ids.length, 1)] ?? randomUUID()),
    fc.uuid(),
    fc.uuid().map((u) => u.toUpperCase()),
    anyJson,
  );
}

const validDate = fc
  .date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('2100-01-01T00:00:00Z') })
  .map((d) => (Number.isNaN(d.getTime()) ? '2026-01-01T00:00:00Z' : d.toISOString()));

/** Filters the API accepts, to reach the stores (and count what a 2xx moved). */
const validFilterArb = fc.record(
  {
    type: fc.constantFrom('order.placed', 'user.created', 'nothing.here'),
    handler: fc.constantFrom('Billing.onOrder', 'Shipping.onOrder', 'Users.onCreated'),
    key: fc.constantFrom('k0', 'k1', 'k2', 'ünï'),
    failedBefore: validDate,
    failedAfter: validDate,
  },
  { requiredKeys: [] },
);

// A filter the API would accept but for one `null` field (once read as "any" by some stores).
const nullishFilterArb = fc
  .tuple(validFilterArb, fc.constantFrom(...FILTER_FIELDS))
  .map(([filter, field]) => ({ ...filter, [field]: null }));

function bodyArb(known: () => Known, replay: boolean): fc.Arbitrary<unknown> {
  const fields = fc.record(
    {
      ids: fc.oneof(fc.array(idArb(known), { maxLength: 4 }), anyJson),
      filter: filterArb,
      all: fc.oneof(fc.constantFrom(true, false, 'true', 1, null), anyJson),
      availableAt: fc.oneof(dateText, anyJson),
      extra: anyJson,
    },
    { requiredKeys: [] },
  );
  // Mostly well-formed, so the stores are reached too; `all` sometimes missing or wrong.
  const shaped = fc.oneof(
    fc.record({ ids: fc.array(idArb(known), { minLength: 1, maxLength: 4 }) }),
    fc.record(
      {
        filter: fc.oneof(validFilterArb, nullishFilterArb, filterArb),
        all: fc.constantFrom(true, true, false, null, 'true'),
        // Only replay takes availableAt; purge refuses it as an unknown field.
        ...(replay ? { availableAt: fc.oneof(validDate, dateText) } : {}),
      },
      { requiredKeys: ['filter'] },
    ),
  );
  return fc.oneof(
    { weight: 5, arbitrary: shaped },
    { weight: 4, arbitrary: fields },
    { weight: 1, arbitrary: anyJson },
    {
      // A well-formed body plus a prototype-ish key, at the top or inside the filter.
      weight: 2,
      arbitrary: fc.tuple(dangerousKey, shaped, fc.boolean()).map(([k, body, inFilter]) => {
        const b = body as Record<string, unknown>;
        return inFilter && isPlainObject(b.filter)
          ? { ...b, filter: { ...b.filter, [k]: 1 } }
          : { ...b, [k]: { all: true, filter: {} } };
      }),
    },
  );
}

function queryArb(known: () => Known, fields: readonly string[]): fc.Arbitrary<string> {
  const cursor = fc.oneof(
    fc.constant(null).map(() => known().cursor ?? ''),
    fc.tuple(dateText, fc.oneof(fc.uuid(), unicode)).map(([at, id]) => cursorOf(`${at}|${id}`)),
    unicode,
  );
  const value = (name: string): fc.Arbitrary<string> =>
    name === 'cursor'
      ? cursor
      : FILTER_FIELDS.includes(name as (typeof FILTER_FIELDS)[number])
        ? (filterValue(name as (typeof FILTER_FIELDS)[number]).map((v) =>
            typeof v === 'string' ? v : (JSON.stringify(v) ?? ''),
          ) as fc.Arbitrary<string>)
        : fc.oneof(
            fc.integer({ min: -5, max: 2_000 }).map(String),
            hugeNumber.map(String),
            fc.constantFrom('1e400', 'NaN', '9'.repeat(400), '0x10', ' 7', ''),
            unicode,
          );
  const name = fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...fields) },
    {
      weight: 1,
      arbitrary: fc.oneof(dangerousKey, unicode, fc.constantFrom('type[a]', 'limit[]')),
    },
  );
  // Several pairs, names may repeat (an array on the server side); raw fragments sometimes.
  return fc
    .array(
      name.chain((n) =>
        fc.tuple(
          fc.constant(n),
          value(n),
          fc.oneof(
            { weight: 9, arbitrary: fc.constant('') },
            fc.constantFrom('%', '%zz', '&&', '='),
          ),
        ),
      ),
      { maxLength: 5 },
    )
    .map((pairs) => pairs.map(([n, v, raw]) => `${pct(n)}=${pct(v)}${raw}`).join('&'));
}

interface Headers {
  apiKey: string | null;
  contentType: string | null;
  other: Array<[string, string]>;
}

const printable = fc.string({ unit: 'grapheme-ascii', maxLength: 40 });
const headersArb: fc.Arbitrary<Headers> = fc.record({
  apiKey: fc.oneof(
    { weight: 8, arbitrary: fc.constant(API_KEY) },
    { weight: 1, arbitrary: fc.constant(null) },
    { weight: 1, arbitrary: printable },
  ),
  contentType: fc.oneof(
    { weight: 6, arbitrary: fc.constant('application/json') },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        null,
        'text/plain',
        'application/x-www-form-urlencoded',
        'application/json; charset=utf-16',
        'application/json; charset=latin1',
        'multipart/form-data; boundary=x',
        'application/*',
      ),
    },
    { weight: 1, arbitrary: printable },
  ),
  other: fc.array(
    fc.tuple(
      fc.oneof(
        fc.constantFrom(
          'content-encoding',
          'accept',
          'accept-charset',
          'x-forwarded-for',
          'x-http-method-override',
          'if-none-match',
        ),
        fc.stringMatching(/^x-[a-z0-9-]{1,20}$/),
      ),
      fc.oneof(printable, fc.constantFrom('gzip', 'br', 'deflate', 'identity', '*/*')),
    ),
    { maxLength: 3 },
  ),
});

/** A request body as sent: JSON of a value, or raw text (what a misbehaving client sends). */
const payloadArb = (known: () => Known, replay = true): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 8, arbitrary: bodyArb(known, replay).map((b) => JSON.stringify(b) ?? 'null') },
    {
      weight: 1,
      arbitrary: fc.oneof(
        unicode,
        fc.constantFrom('', 'null', '"x"', '[]', '{"filter":', 'filter[type]=x&all=true'),
      ),
    },
  );

type Method = 'get' | 'post' | 'delete';

function send(
  t: AdminApp,
  method: Method,
  path: string,
  headers: Headers,
  payload?: string,
): Promise<Response> {
  let req = t.http[method](path);
  if (headers.apiKey !== null) req = req.set('x-api-key', headers.apiKey);
  for (const [name, value] of headers.other) req = req.set(name, value);
  // Bodiless POSTs and DELETEs too: a state-changing call must declare JSON.
  if (headers.contentType !== null && method !== 'get') {
    req = req.set('Content-Type', headers.contentType);
  }
  return payload === undefined ? req : req.send(payload);
}

function parseBody(payload = ''): Record<string, unknown> {
  try {
    const body: unknown = JSON.parse(payload);
    return typeof body === 'object' && body !== null ? (body as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/** The admin API under random requests, against one store. */
export function describeAdminFuzz(harness: AdminStoreHarness, runs = RUNS): void {
  let t: AdminApp;
  let known: Known = { ids: [], cursor: null };
  let seeded = 0;
  // Statuses answered in the current test: each test checks it reached the store and was refused.
  let statuses = new Set<number>();
  beforeEach(() => {
    statuses = new Set();
  });

  async function refresh(): Promise<void> {
    const page = await t.store.listDeadLetters({ limit: 3 });
    const all = await t.store.listDeadLetters({ limit: 1_000 });
    known = { ids: all.items.map((d) => d.id), cursor: page.nextCursor };
  }

  /** After a 2xx that moved dead letters: dead-letter the replayed ones again, top up. */
  async function restore(): Promise<void> {
    t.behaviour.failing = true;
    await t.dispatcher.drain();
    if ((await t.store.stats()).dead < 6) {
      await seed(t, { orders: 3, users: 2, from: (seeded += 10) });
    }
    await refresh();
  }

  beforeAll(async () => {
    // Handler failure stacks are data the API returns on purpose (errorStacks); off here, so any
    // stack in a response is one the API leaked.
    t = await createAdminApp({ store: await harness.store(), errorStacks: false });
    await seed(t, { orders: 3, users: 2 });
    await refresh();
  });
  afterAll(async () => {
    await t?.close();
  });

  /**
   * Sends one request and checks the invariants. `moved` is how many dead letters a 2xx said it
   * replayed or purged.
   */
  async function check(
    bulk: boolean,
    method: Method,
    path: string,
    headers: Headers,
    payload?: string,
  ): Promise<void> {
    const before = await state(t);
    const res = await send(t, method, path, headers, payload);
    statuses.add(res.status);
    const context = `${method.toUpperCase()} ${path} ${payload ?? ''} -> ${res.status} ${res.text}`;
    if (res.status >= 500) throw new Error(`5xx: ${context}`);
    if (LEAK.test(res.text)) throw new Error(`leak: ${context}`);
    if (res.status >= 400) {
      expect({ context, state: await state(t) }).toEqual({ context, state: before });
      return;
    }
    const moved =
      (res.body as { replayed?: number; purged?: number }).replayed ??
      (res.body as { purged?: number }).purged;
    if (moved === undefined) {
      expect({ context, state: await state(t) }).toEqual({ context, state: before });
      return;
    }
    const expected = bulk ? expectedMoved(before, parseBody(payload)) : 1;
    expect({ context, moved, dead: (await t.store.stats()).dead }).toEqual({
      context,
      moved: expected,
      dead: before.stats.dead - moved,
    });
    await restore();
  }

  const params = (offset: number): fc.Parameters<unknown> => ({
    seed: SEED + offset,
    numRuns: runs,
    endOnFailure: true,
  });

  // PostgreSQL refused a NUL with an error (a 500); the stores mangle lone surrogates into U+FFFD.
  it(
    'answers a NUL or a lone surrogate in any filter field with 400 naming it',
    async () => {
      const before = await state(t);
      for (const field of ['type', 'handler', 'key'] as const) {
        for (const [query, body] of [
          ['a%00', '"a\\u0000"'],
          ['%00', '"\\ud800b"'],
        ]) {
          for (const route of ['dead-letters', 'dead-letters/summary']) {
            const res = await t.http
              .get(`/outbox/${route}?${field}=${query}`)
              .set('x-api-key', API_KEY);
            expect({ route, status: res.status, message: res.body.message }).toEqual({
              route,
              status: 400,
              message: [expect.stringContaining(`${field} must not contain a NUL`)],
            });
          }
          for (const route of ['replay', 'purge']) {
            const res = await t.http
              .post(`/outbox/dead-letters/${route}`)
              .set('x-api-key', API_KEY)
              .set('Content-Type', 'application/json')
              .send(`{"filter": {"${field}": ${body}}, "all": true}`);
            expect({ route, status: res.status, message: res.body.message }).toEqual({
              route,
              status: 400,
              message: [expect.stringContaining(`filter.${field} must not contain`)],
            });
          }
        }
      }
      expect(await state(t)).toEqual(before);
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    'GET dead-letters: random query strings and cursors',
    async () => {
      const fields = [...FILTER_FIELDS, 'limit', 'cursor'];
      await fc.assert(
        fc.asyncProperty(
          queryArb(() => known, fields),
          headersArb,
          (query, headers) => check(false, 'get', `/outbox/dead-letters?${query}`, headers),
        ),
        params(1),
      );
      expect([...statuses]).toEqual(expect.arrayContaining([200, 400, 403]));
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    'GET dead-letters/summary: random query strings',
    async () => {
      await fc.assert(
        fc.asyncProperty(
          queryArb(() => known, FILTER_FIELDS),
          headersArb,
          (query, headers) => check(false, 'get', `/outbox/dead-letters/summary?${query}`, headers),
        ),
        params(2),
      );
      expect([...statuses]).toEqual(expect.arrayContaining([200, 400, 403]));
    },
    FUZZ_TIMEOUT_MS,
  );

  it.each([
    ['replay', 3],
    ['purge', 4],
  ])(
    'POST dead-letters/%s: random bodies and headers',
    async (route, offset) => {
      await fc.assert(
        fc.asyncProperty(
          payloadArb(() => known, route === 'replay'),
          headersArb,
          (payload, headers) =>
            check(true, 'post', `/outbox/dead-letters/${route}`, headers, payload),
        ),
        params(offset),
      );
      expect([...statuses]).toEqual(expect.arrayContaining([200, 400, 403, 415]));
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    'routes by id, and stats: random ids, bodies and headers',
    async () => {
      const route = fc.oneof(
        fc.constant((id: string) => ['get', `/outbox/dead-letters/${id}`] as const),
        fc.constant((id: string) => ['post', `/outbox/dead-letters/${id}/replay`] as const),
        fc.constant((id: string) => ['delete', `/outbox/dead-letters/${id}`] as const),
        fc.constant(() => ['get', '/outbox/stats'] as const),
      );
      const id = idArb(() => known).map((v) =>
        pct(typeof v === 'string' ? v : (JSON.stringify(v) ?? '')),
      );
      await fc.assert(
        fc.asyncProperty(
          route,
          id,
          payloadArb(() => known),
          headersArb,
          (at, i, payload, headers) => {
            const [method, path] = at(i);
            return check(false, method, path, headers, method === 'post' ? payload : undefined);
          },
        ),
        params(5),
      );
      expect([...statuses]).toEqual(expect.arrayContaining([200, 400, 403, 404]));
    },
    FUZZ_TIMEOUT_MS,
  );
}
