import { randomUUID } from 'node:crypto';
import { OutboxStoreOptions } from 'nestjs-outbox';
import { Response } from 'supertest';
import { AdminApp, AdminPlatform, API_KEY, createAdminApp, seed, snapshot } from './admin-app';

/** A store to run the admin suite against. */
export interface AdminStoreHarness {
  /** Options of an empty store for one app (apps run one after another). */
  store(): Promise<OutboxStoreOptions>;
  /** Moves the store clock forward enough that later dead letters get a later `deadAt`. */
  advance(): Promise<void>;
  /** The HTTP platform of the apps. @default 'express' */
  platform?: AdminPlatform;
}

interface Item {
  id: string;
  eventId: string;
  type: string;
  key: string | null;
  handler: string;
  attempts: number;
  errors: Array<{ name: string; message: string }>;
  deadAt: string;
}

const key = { 'x-api-key': API_KEY };
/** Headers of a state-changing call: every POST and DELETE declares JSON, even with no body. */
const write = { ...key, 'Content-Type': 'application/json' };

/** The admin HTTP API against one store. */
export function describeAdminApi(harness: AdminStoreHarness): void {
  let t: AdminApp | undefined;
  const fastify = harness.platform === 'fastify';
  // A state-changing call with nothing to say. Fastify's JSON parser refuses an empty body with
  // `Content-Type: application/json` before any route runs (docs/admin.md, Fastify), so there the
  // call sends `{}`; Express reads an empty body as none.
  const noBody = fastify ? {} : undefined;
  /**
   * Requests Fastify itself answers before the admin routes run (an empty JSON body, a media
   * type it has no parser for, a `__proto__` key, a NUL in the path): the status is the same as
   * on Express, the body and headers are Fastify's own.
   */
  const answeredByFastify = new Set([
    'replay with no body',
    'a multipart replay',
    'a JSON Patch document',
    '__proto__',
  ]);
  const ownAnswer = (name: string) => fastify && answeredByFastify.has(name);

  async function open(): Promise<AdminApp> {
    t = await createAdminApp({ store: await harness.store(), platform: harness.platform });
    return t;
  }

  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  async function listAll(
    a: AdminApp,
    query: Record<string, string | number> = {},
    limit = 100,
  ): Promise<Item[]> {
    const items: Item[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res: Response = await a.http
        .get('/outbox/dead-letters')
        .set(key)
        .query({ ...query, limit, ...(cursor ? { cursor } : {}) })
        .expect(200);
      expect(res.body.items.length).toBeLessThanOrEqual(limit);
      items.push(...res.body.items);
      cursor = res.body.nextCursor;
      pages++;
      expect(pages).toBeLessThan(1_000);
    } while (cursor);
    return items;
  }

  describe('reading', () => {
    // One seeded app for the read-only tests: 260 order dead letters, then later 20 user ones.
    let a: AdminApp;
    let all: Item[];
    let boundary: string;

    beforeAll(async () => {
      a = await createAdminApp({ store: await harness.store(), platform: harness.platform });
      await seed(a, { orders: 130, users: 0 });
      await harness.advance();
      await seed(a, { orders: 0, users: 20, from: 1000 });
      all = await listAll(a);
      boundary = all
        .filter((i) => i.type === 'user.created')
        .map((i) => i.deadAt)
        .sort()[0];
    });
    afterAll(async () => {
      await a?.close();
    });

    it('pages through 280 dead letters without gaps or repeats, in (deadAt, id) order', async () => {
      expect(all).toHaveLength(280);
      expect(new Set(all.map((i) => i.id)).size).toBe(280);
      for (let i = 1; i < all.length; i++) {
        const [p, c] = [all[i - 1], all[i]];
        expect(p.deadAt < c.deadAt || (p.deadAt === c.deadAt && p.id < c.id)).toBe(true);
      }
      // An odd page size that never lines up with the data gives the same sequence.
      const bySeven = await listAll(a, {}, 7);
      expect(bySeven.map((i) => i.id)).toEqual(all.map((i) => i.id));
    });

    it('uses the default page size and says when there is no next page', async () => {
      const first = await a.http.get('/outbox/dead-letters').set(key).expect(200);
      expect(first.body.items).toHaveLength(50);
      expect(typeof first.body.nextCursor).toBe('string');
      const onlyUsers = await a.http
        .get('/outbox/dead-letters')
        .set(key)
        .query({ type: 'user.created' })
        .expect(200);
      expect(onlyUsers.body.items).toHaveLength(20);
      expect(onlyUsers.body.nextCursor).toBeNull();
    });

    it('shows event id, type, key, handler, attempts and error history; payload only on the single view', async () => {
      const item = all.find((i) => i.handler === 'Billing.onOrder')!;
      expect(item).toMatchObject({
        eventId: expect.any(String),
        type: 'order.placed',
        key: expect.stringMatching(/^k[012]$/),
        attempts: 1,
        reason: 'rejected',
        errors: [
          expect.objectContaining({
            name: 'NonRetryableError',
            attempt: 1,
            message: expect.stringContaining('rejected by Billing'),
          }),
        ],
      });
      expect(item).not.toHaveProperty('payload');
      const one = await a.http.get(`/outbox/dead-letters/${item.id}`).set(key).expect(200);
      expect(one.headers['cache-control']).toBe('no-store');
      expect(one.body).toMatchObject({
        ...item,
        payload: { n: expect.any(Number) },
        headers: { tenant: 't1' },
      });
    });

    it.each([
      ['type', { type: 'user.created' }, (i: Item) => i.type === 'user.created'],
      ['handler', { handler: 'Shipping.onOrder' }, (i: Item) => i.handler === 'Shipping.onOrder'],
      ['key', { key: 'k1' }, (i: Item) => i.key === 'k1'],
      [
        'type + handler + key',
        { type: 'order.placed', handler: 'Billing.onOrder', key: 'k2' },
        (i: Item) => i.type === 'order.placed' && i.handler === 'Billing.onOrder' && i.key === 'k2',
      ],
    ])('filters by %s', async (_name, query, predicate) => {
      const expected = all.filter(predicate).map((i) => i.id);
      expect(expected.length).toBeGreaterThan(0);
      expect(expected.length).toBeLessThan(all.length);
      expect((await listAll(a, query, 30)).map((i) => i.id)).toEqual(expected);
    });

    it('filters by failedBefore (strict) and failedAfter (inclusive)', async () => {
      const before = await listAll(a, { failedBefore: boundary });
      const after = await listAll(a, { failedAfter: boundary });
      expect(before.map((i) => i.id)).toEqual(
        all.filter((i) => i.deadAt < boundary).map((i) => i.id),
      );
      expect(after.map((i) => i.id)).toEqual(
        all.filter((i) => i.deadAt >= boundary).map((i) => i.id),
      );
      expect(before.length).toBeGreaterThan(0);
      expect(before.every((i) => i.type === 'order.placed')).toBe(true);
      expect(after.filter((i) => i.type === 'user.created')).toHaveLength(20);
    });

    it('summarizes by type, handler and error fingerprint, with filters', async () => {
      const res = await a.http.get('/outbox/dead-letters/summary').set(key).expect(200);
      expect(res.headers['cache-control']).toBe('no-store');
      expect(res.body.total).toBe(280);
      expect(res.body.groups).toEqual(
        expect.arrayContaining([
          {
            type: 'order.placed',
            handler: 'Billing.onOrder',
            errorName: 'NonRetryableError',
            fingerprint: 'order <n> rejected by Billing',
            count: 130,
          },
          {
            type: 'order.placed',
            handler: 'Shipping.onOrder',
            errorName: 'NonRetryableError',
            fingerprint: 'order <n> rejected by Shipping',
            count: 130,
          },
          {
            type: 'user.created',
            handler: 'Users.onCreated',
            errorName: 'Error',
            fingerprint: 'user <n> has no mailbox',
            count: 20,
          },
        ]),
      );
      const users = await a.http
        .get('/outbox/dead-letters/summary')
        .set(key)
        .query({ handler: 'Users.onCreated' })
        .expect(200);
      expect(users.body).toEqual({
        total: 20,
        groups: [expect.objectContaining({ handler: 'Users.onCreated', count: 20 })],
      });
    });

    it('reports store stats: pending, leased, dead, oldest pending age, per type', async () => {
      const res = await a.http.get('/outbox/stats').set(key).expect(200);
      expect(res.headers['cache-control']).toBe('no-store');
      expect(res.body).toMatchObject({
        pending: 0,
        leased: 0,
        dead: 280,
        oldestPendingAgeMs: 0,
        byType: {
          'order.placed': { dead: 260, pending: 0, leased: 0 },
          'user.created': { dead: 20 },
        },
      });
    });
  });

  describe('replay and purge', () => {
    it('replays one dead letter by id; it is delivered on the next drain', async () => {
      const a = await open();
      await seed(a, { orders: 2, users: 0 });
      const [first] = await listAll(a);
      const res = await a.http
        .post(`/outbox/dead-letters/${first.id}/replay`)
        .set(write)
        .send(noBody)
        .expect(200);
      expect(res.body).toEqual({ replayed: 1 });
      expect(res.headers['cache-control']).toBe('no-store');
      await a.http.get(`/outbox/dead-letters/${first.id}`).set(key).expect(404);
      a.behaviour.failing = false;
      await a.dispatcher.drain();
      expect(a.behaviour.delivered).toEqual([`${first.handler.split('.')[0]}:${first.eventId}`]);
      expect((await a.store.stats()).dead).toBe(3);
    });

    it('replays a list of ids with one store call, then delivers them', async () => {
      const a = await open();
      await seed(a, { orders: 3, users: 2 });
      const ids = (await listAll(a)).slice(0, 4).map((i) => i.id);
      const replay = jest.spyOn(a.store, 'replay');
      const res = await a.http
        .post('/outbox/dead-letters/replay')
        .set(key)
        .send({ ids: [...ids, randomUUID()] })
        .expect(200);
      expect(res.body).toEqual({ replayed: 4 });
      expect(replay).toHaveBeenCalledTimes(1);
      a.behaviour.failing = false;
      await a.dispatcher.drain();
      expect(a.behaviour.delivered).toHaveLength(4);
      expect((await a.store.stats()).dead).toBe(4);
    });

    // Found by the fuzz tests: the memory store counted a repeated id twice, and only SQL uuid
    // columns matched an id in upper case.
    it('counts a repeated id once and takes ids in any case, on every route', async () => {
      const a = await open();
      await seed(a, { orders: 2, users: 0 });
      const [first, second, third, fourth] = await listAll(a);
      const upper = (id: string) => id.toUpperCase();
      await a.http
        .get(`/outbox/dead-letters/${upper(first.id)}`)
        .set(key)
        .expect(200);
      const replayed = await a.http
        .post('/outbox/dead-letters/replay')
        .set(key)
        .send({ ids: [first.id, first.id, upper(first.id), upper(second.id)] })
        .expect(200);
      expect(replayed.body).toEqual({ replayed: 2 });
      const purged = await a.http
        .post('/outbox/dead-letters/purge')
        .set(key)
        .send({ ids: [third.id, upper(third.id), third.id] })
        .expect(200);
      expect(purged.body).toEqual({ purged: 1 });
      await a.http
        .post(`/outbox/dead-letters/${upper(fourth.id)}/replay`)
        .set(write)
        .send(noBody)
        .expect(200, { replayed: 1 });
      expect(await a.store.stats()).toMatchObject({ dead: 0, pending: 3 });
    });

    it('replays by filter, and every dead letter with a confirmed match-all filter', async () => {
      const a = await open();
      await seed(a, { orders: 3, users: 2 });
      const byType = await a.http
        .post('/outbox/dead-letters/replay')
        .set(key)
        .send({ filter: { type: 'user.created' } })
        .expect(200);
      expect(byType.body).toEqual({ replayed: 2 });
      a.behaviour.failing = false;
      await a.dispatcher.drain();
      expect(a.behaviour.delivered.map((d) => d.split(':')[0])).toEqual(['Users', 'Users']);
      const everything = await a.http
        .post('/outbox/dead-letters/replay')
        .set(key)
        .send({ filter: {}, all: true })
        .expect(200);
      expect(everything.body).toEqual({ replayed: 6 });
      await a.dispatcher.drain();
      expect(a.behaviour.delivered).toHaveLength(8);
      expect(await a.store.stats()).toMatchObject({ dead: 0, pending: 0 });
    });

    it('replays at a later time when availableAt is given', async () => {
      const a = await open();
      await seed(a, { orders: 1, users: 0 });
      const [first] = await listAll(a);
      const later = new Date(Date.now() + 3_600_000).toISOString();
      await a.http
        .post(`/outbox/dead-letters/${first.id}/replay`)
        .set(key)
        .send({ availableAt: later })
        .expect(200);
      a.behaviour.failing = false;
      await a.dispatcher.drain();
      expect(a.behaviour.delivered).toEqual([]);
      expect(await a.store.stats()).toMatchObject({ pending: 1, due: 0, dead: 1 });
    });

    it('purges one by id, a list of ids, by filter, and all with all: true', async () => {
      const a = await open();
      await seed(a, { orders: 4, users: 3 });
      const items = await listAll(a);
      expect(items).toHaveLength(11);
      const one = await a.http
        .delete(`/outbox/dead-letters/${items[0].id}`)
        .set(write)
        .send(noBody)
        .expect(200);
      expect(one.body).toEqual({ purged: 1 });
      await a.http.get(`/outbox/dead-letters/${items[0].id}`).set(key).expect(404);
      await a.http
        .delete(`/outbox/dead-letters/${items[0].id}`)
        .set(write)
        .send(noBody)
        .expect(404);
      const purge = jest.spyOn(a.store, 'purge');
      const some = await a.http
        .post('/outbox/dead-letters/purge')
        .set(key)
        .send({ ids: [items[0].id, items[1].id, items[2].id] })
        .expect(200);
      expect(some.body).toEqual({ purged: 2 });
      expect(purge).toHaveBeenCalledTimes(1);
      const users = await a.http
        .post('/outbox/dead-letters/purge')
        .set(key)
        .send({ filter: { type: 'user.created' } })
        .expect(200);
      const usersLeft = items.slice(3).filter((i) => i.type === 'user.created').length;
      expect(users.body).toEqual({ purged: usersLeft });
      const rest = await a.http
        .post('/outbox/dead-letters/purge')
        .set(key)
        .send({ filter: {}, all: true })
        .expect(200);
      expect(rest.body).toEqual({ purged: 8 - usersLeft });
      expect(await listAll(a)).toEqual([]);
      expect((await a.store.stats()).dead).toBe(0);
    });

    it('takes application/json with parameters and in any letter case', async () => {
      const a = await open();
      await seed(a, { orders: 2, users: 0 });
      const [first, second] = await listAll(a);
      for (const [type, id] of [
        ['application/json; charset=utf-8', first.id],
        ['Application/JSON ; Charset="UTF-8"', second.id],
      ]) {
        await a.http
          .post('/outbox/dead-letters/purge')
          .set(key)
          .set('Content-Type', type)
          .send(JSON.stringify({ ids: [id] }))
          .expect(200, { purged: 1 });
      }
    });
  });

  describe('refusals change nothing', () => {
    let a: AdminApp;
    let items: Item[];
    let before: unknown;

    beforeAll(async () => {
      a = await createAdminApp({ store: await harness.store(), platform: harness.platform });
      await seed(a, { orders: 3, users: 2 });
      items = await listAll(a);
      before = await snapshot(a);
    });
    afterEach(async () => {
      expect(await snapshot(a)).toEqual(before);
    });
    afterAll(async () => {
      await a?.close();
    });

    it('answers 403 to a caller the guard denies, on every route', async () => {
      const id = () => items[0].id;
      const calls = [
        () => a.http.get('/outbox/dead-letters'),
        () => a.http.get('/outbox/dead-letters/summary'),
        () => a.http.get(`/outbox/dead-letters/${id()}`),
        () => a.http.post(`/outbox/dead-letters/${id()}/replay`),
        () => a.http.post('/outbox/dead-letters/replay').send({ filter: {}, all: true }),
        () => a.http.delete(`/outbox/dead-letters/${id()}`),
        () => a.http.post('/outbox/dead-letters/purge').send({ filter: {}, all: true }),
        () => a.http.get('/outbox/stats'),
      ];
      for (const call of calls) {
        for (const req of [call(), call().set('x-api-key', 'wrong')]) {
          const res = await req;
          expect(res.status).toBe(403);
          expect(res.headers['cache-control']).toBe('no-store');
          expect(res.body).toEqual({
            statusCode: 403,
            error: 'Forbidden',
            message: 'Forbidden resource',
          });
        }
      }
    });

    const cursorOf = (text: string) => Buffer.from(text, 'utf8').toString('base64url');
    const bad: Array<[string, number, (a: AdminApp) => Promise<Response>]> = [
      ['a malformed id', 400, (a) => a.http.get('/outbox/dead-letters/not-a-uuid').set(key)],
      [
        'a malformed id on replay',
        400,
        (a) => a.http.post('/outbox/dead-letters/123/replay').set(write).send(noBody),
      ],
      [
        'a malformed id on delete',
        400,
        (a) => a.http.delete("/outbox/dead-letters/1'%20OR%201=1").set(write).send(noBody),
      ],
      ['an unknown id', 404, (a) => a.http.get(`/outbox/dead-letters/${randomUUID()}`).set(key)],
      [
        'an unknown id on replay',
        404,
        (a) => a.http.post(`/outbox/dead-letters/${randomUUID()}/replay`).set(write).send(noBody),
      ],
      [
        'an unknown id on delete',
        404,
        (a) => a.http.delete(`/outbox/dead-letters/${randomUUID()}`).set(write).send(noBody),
      ],
      ['limit above the max', 400, (a) => a.http.get('/outbox/dead-letters?limit=101').set(key)],
      ['limit 0', 400, (a) => a.http.get('/outbox/dead-letters?limit=0').set(key)],
      ['a non-numeric limit', 400, (a) => a.http.get('/outbox/dead-letters?limit=ten').set(key)],
      ['a forged cursor', 400, (a) => a.http.get('/outbox/dead-letters?cursor=garbage').set(key)],
      [
        'a cursor with a non-uuid id',
        400,
        (a) =>
          a.http
            .get(`/outbox/dead-letters?cursor=${cursorOf("2024-01-01T00:00:00Z|1' OR 1=1")}`)
            .set(key),
      ],
      [
        'a bad date',
        400,
        (a) => a.http.get('/outbox/dead-letters?failedBefore=yesterday').set(key),
      ],
      [
        'a repeated filter field',
        400,
        (a) => a.http.get('/outbox/dead-letters?type=a&type=b').set(key),
      ],
      [
        'an unknown query field',
        400,
        (a) => a.http.get('/outbox/dead-letters?status=dead').set(key),
      ],
      [
        'an unknown summary field',
        400,
        (a) => a.http.get('/outbox/dead-letters/summary?limit=3').set(key),
      ],
      [
        'replay with neither ids nor filter',
        400,
        (a) => a.http.post('/outbox/dead-letters/replay').set(key).send({}),
      ],
      ['replay with no body', 400, (a) => a.http.post('/outbox/dead-letters/replay').set(write)],
      [
        'purge with neither ids nor filter',
        400,
        (a) =>
          a.http
            .post('/outbox/dead-letters/purge')
            .set(key)
            .send({ availableAt: new Date().toISOString() }),
      ],
      [
        'replay with a match-all filter and no all',
        400,
        (a) => a.http.post('/outbox/dead-letters/replay').set(key).send({ filter: {} }),
      ],
      [
        'purge with a match-all filter and no all',
        400,
        (a) => a.http.post('/outbox/dead-letters/purge').set(key).send({ filter: {}, all: false }),
      ],
      [
        'purge with all but no filter',
        400,
        (a) => a.http.post('/outbox/dead-letters/purge').set(key).send({ all: true }),
      ],
      [
        'both ids and filter',
        400,
        (a) =>
          a.http
            .post('/outbox/dead-letters/purge')
            .set(key)
            .send({ ids: [items[0].id], filter: { type: 'order.placed' } }),
      ],
      [
        'ids with all',
        400,
        (a) =>
          a.http
            .post('/outbox/dead-letters/purge')
            .set(key)
            .send({ ids: [items[0].id], all: true }),
      ],
      [
        'an empty id list',
        400,
        (a) => a.http.post('/outbox/dead-letters/purge').set(key).send({ ids: [] }),
      ],
      [
        'a malformed id in the list',
        400,
        (a) =>
          a.http
            .post('/outbox/dead-letters/replay')
            .set(key)
            .send({ ids: [items[0].id, 'nope'] }),
      ],
      [
        '1,001 ids',
        400,
        (a) =>
          a.http
            .post('/outbox/dead-letters/purge')
            .set(key)
            .send({ ids: [items[0].id, ...Array.from({ length: 1000 }, () => randomUUID())] }),
      ],
      [
        'an unknown body field',
        400,
        (a) =>
          a.http
            .post('/outbox/dead-letters/replay')
            .set(key)
            .send({ filter: { type: 'order.placed' }, force: true }),
      ],
      [
        'an unknown filter field',
        400,
        (a) =>
          a.http
            .post('/outbox/dead-letters/purge')
            .set(key)
            .send({ filter: { status: 'dead' } }),
      ],
      [
        'a filter that is not an object',
        400,
        (a) =>
          a.http
            .post('/outbox/dead-letters/purge')
            .set(key)
            .send({ filter: 'order.placed', all: true }),
      ],
      [
        'a filter that is an array',
        400,
        (a) => a.http.post('/outbox/dead-letters/purge').set(key).send({ filter: [], all: true }),
      ],
      [
        'a body that is an array',
        400,
        (a) => a.http.post('/outbox/dead-letters/purge').set(key).send([items[0].id]),
      ],
      [
        'a bad availableAt',
        400,
        (a) =>
          a.http
            .post(`/outbox/dead-letters/${items[0].id}/replay`)
            .set(key)
            .send({ availableAt: 'soon' }),
      ],
      [
        'a body over 64 KiB',
        413,
        (a) =>
          a.http
            .post('/outbox/dead-letters/purge')
            .set(key)
            .send({ filter: { type: 'x'.repeat(70_000) } }),
      ],
      [
        'a body over 64 KiB on a single replay',
        413,
        (a) =>
          a.http
            .post(`/outbox/dead-letters/${items[0].id}/replay`)
            .set(key)
            .send({ pad: 'x'.repeat(66_000) }),
      ],
    ];

    // Refusals whose message must name the offending field. `null` never means "no criterion":
    // it used to match every dead letter (Redis purged all without `all: true`) or crash a store.
    const post = (a: AdminApp, route: string, body: unknown) =>
      a.http
        .post(`/outbox/dead-letters/${route}`)
        .set(key)
        .send(body as object);
    const postJson = (a: AdminApp, route: string, json: string) =>
      a.http
        .post(`/outbox/dead-letters/${route}`)
        .set(key)
        .set('Content-Type', 'application/json')
        .send(json);
    const list = (a: AdminApp, query: string) =>
      a.http.get(`/outbox/dead-letters${query}`).set(key);
    const farCursor = (at: string) => cursorOf(`${at}|${randomUUID()}`);
    type Named = [name: string, field: string, call: (a: AdminApp) => Promise<Response>];
    const named: Named[] = [
      ...(['purge', 'replay'] as const).flatMap((route): Named[] => [
        ...['type', 'handler', 'key', 'failedBefore', 'failedAfter'].flatMap((field): Named[] => [
          [
            `${route} with filter.${field} null`,
            field,
            (a) => post(a, route, { filter: { [field]: null } }),
          ],
          [
            `${route} with filter.${field} null and all: true`,
            field,
            (a) => post(a, route, { filter: { [field]: null }, all: true }),
          ],
        ]),
        [`${route} with ids null`, 'ids', (a) => post(a, route, { ids: null })],
        [`${route} with filter null`, 'filter', (a) => post(a, route, { filter: null })],
        [
          `${route} with filter null and all: true`,
          'filter',
          (a) => post(a, route, { filter: null, all: true }),
        ],
        [`${route} with all null`, 'all', (a) => post(a, route, { filter: {}, all: null })],
        [
          `${route} with ids null beside a filter`,
          'ids',
          (a) => post(a, route, { ids: null, filter: { type: 'order.placed' } }),
        ],
        [
          `${route} with failedBefore before 1970`,
          'failedBefore',
          (a) => post(a, route, { filter: { failedBefore: '0001-01-01T00:00:00Z' } }),
        ],
        [
          `${route} with failedAfter after 9999`,
          'failedAfter',
          (a) => post(a, route, { filter: { failedAfter: '+300000-01-01T00:00:00Z' } }),
        ],
      ]),
      [
        'replay with availableAt null',
        'availableAt',
        (a) => post(a, 'replay', { filter: { type: 'order.placed' }, availableAt: null }),
      ],
      [
        'a single replay with availableAt null',
        'availableAt',
        (a) => post(a, `${items[0].id}/replay`, { availableAt: null }),
      ],
      [
        'a single replay with availableAt before 1970',
        'availableAt',
        (a) => post(a, `${items[0].id}/replay`, { availableAt: '1000-01-01T00:00:00Z' }),
      ],
      ['a list with an empty type', 'type', (a) => list(a, '?type=')],
      ['a list with an empty key', 'key', (a) => list(a, '?key')],
      [
        'a summary with an empty handler',
        'handler',
        (a) => a.http.get('/outbox/dead-letters/summary?handler=').set(key),
      ],
      [
        'a list with failedBefore before 1970',
        'failedBefore',
        (a) => list(a, '?failedBefore=1969-12-31T23:59:59Z'),
      ],
      [
        'a summary with failedAfter in year 1',
        'failedAfter',
        (a) => a.http.get('/outbox/dead-letters/summary?failedAfter=0001-01-01T00:00:00Z').set(key),
      ],
      [
        'a cursor in year 300000',
        'cursor',
        (a) => list(a, `?cursor=${farCursor('+300000-01-01T00:00:00.000Z')}`),
      ],
      [
        'a cursor in year -5000',
        'cursor',
        (a) => list(a, `?cursor=${farCursor('-005000-01-01T00:00:00.000Z')}`),
      ],
      [
        'a cursor in year 1',
        'cursor',
        (a) => list(a, `?cursor=${farCursor('0001-01-01T00:00:00.000Z')}`),
      ],
      [
        'a cursor with a trailing part',
        'cursor',
        (a) => list(a, `?cursor=${cursorOf(`2026-01-01T00:00:00.000Z|${randomUUID()}|x`)}`),
      ],
      ['an empty cursor', 'cursor', (a) => list(a, '?cursor=')],
      // Nest's pipe deletes prototype keys silently; they are unknown fields like any other.
      [
        'a body with a __proto__ key',
        '__proto__',
        (a) => postJson(a, 'purge', '{"__proto__": {"all": true}, "filter": {}}'),
      ],
      [
        'a filter with a constructor key',
        'filter.constructor',
        (a) => postJson(a, 'replay', '{"filter": {"constructor": {"type": "x"}}, "all": true}'),
      ],
      ['a query with a __proto__ field', '__proto__', (a) => list(a, '?__proto__=x')],
      // class-validator's whitelist looked names up in a plain object, so toString passed.
      [
        'a filter with a toString key',
        'filter.toString',
        (a) => postJson(a, 'purge', '{"filter": {"type": "order.placed", "toString": 1}}'),
      ],
      [
        'a body with a hasOwnProperty key',
        'hasOwnProperty',
        (a) =>
          postJson(a, 'replay', '{"ids": ["%s"], "hasOwnProperty": 1}'.replace('%s', items[0].id)),
      ],
      ['a query with a valueOf field', 'valueOf', (a) => list(a, '?valueOf=1')],
      [
        'ids with a prototype key',
        'prototype',
        (a) => postJson(a, 'purge', '{"ids": ["x"], "prototype": {"all": true}}'),
      ],
      // Tens of thousands of levels fit in the body limit; recursing into them overflowed the stack.
      [
        'a deeply nested filter',
        'filter',
        (a) => postJson(a, 'purge', `{"filter": ${'['.repeat(20_000)}${']'.repeat(20_000)}}`),
      ],
    ];

    it('names the id when a path id is not a UUID, on every route that takes one', async () => {
      for (const res of [
        await a.http.get('/outbox/dead-letters/not-a-uuid').set(key),
        await a.http.post('/outbox/dead-letters/123/replay').set(write).send(noBody),
        await a.http.delete('/outbox/dead-letters/%E2%80%8B').set(write).send(noBody),
      ]) {
        expect({ status: res.status, message: res.body.message }).toEqual({
          status: 400,
          message: 'id must be a UUID',
        });
      }
    });

    it.each(named)('answers %s with 400 naming %s', async (_name, field, call) => {
      const res = await call(a);
      expect({ status: res.status, body: res.body }).toMatchObject({
        status: 400,
        body: { statusCode: 400, message: expect.anything() },
      });
      if (ownAnswer(field)) return;
      expect(res.headers['cache-control']).toBe('no-store');
      expect(JSON.stringify(res.body.message)).toContain(field);
    });

    it("leaves malformed JSON and bodies over the app's parser limit to the app (400 / 413)", async () => {
      // Express parses the body before any route code runs; its errors come from Nest's handler.
      await a.http
        .post('/outbox/dead-letters/purge')
        .set(key)
        .set('Content-Type', 'application/json')
        .send('{"filter": {}, "all": tr')
        .expect(400);
      await a.http
        .post('/outbox/dead-letters/purge')
        .set(key)
        .send({ filter: {}, all: true, pad: 'x'.repeat(200_000) })
        .expect(413);
    });

    // A cross-site HTML form can send these (no CORS preflight) and carries the admin cookie, if
    // the app's guard accepts one; a state-changing call must declare JSON, which a form cannot.
    const unsupported: Array<[string, (a: AdminApp) => Promise<Response>]> = [
      [
        'a form-encoded purge by ids',
        (a) =>
          a.http
            .post('/outbox/dead-letters/purge')
            .set(key)
            .type('form')
            .send(`ids[0]=${items[0].id}&ids[1]=${items[1].id}`),
      ],
      [
        'a form-encoded replay by filter',
        (a) =>
          a.http
            .post('/outbox/dead-letters/replay')
            .set(key)
            .type('form')
            .send('filter[type]=order.placed'),
      ],
      [
        'a text/plain purge holding JSON',
        (a) =>
          a.http
            .post('/outbox/dead-letters/purge')
            .set(key)
            .set('Content-Type', 'text/plain')
            .send(JSON.stringify({ ids: [items[0].id] })),
      ],
      [
        'a multipart replay',
        (a) => a.http.post('/outbox/dead-letters/replay').set(key).field('ids', items[0].id),
      ],
      [
        'a bodiless single replay with no Content-Type',
        (a) => a.http.post(`/outbox/dead-letters/${items[0].id}/replay`).set(key),
      ],
      [
        'a bodiless single replay as text/plain',
        (a) =>
          a.http
            .post(`/outbox/dead-letters/${items[0].id}/replay`)
            .set(key)
            .set('Content-Type', 'text/plain'),
      ],
      [
        'a delete with no Content-Type',
        (a) => a.http.delete(`/outbox/dead-letters/${items[0].id}`).set(key),
      ],
      [
        'a JSON Patch document',
        (a) =>
          a.http
            .post('/outbox/dead-letters/purge')
            .set(key)
            .set('Content-Type', 'application/json-patch+json')
            .send(JSON.stringify({ ids: [items[0].id] })),
      ],
    ];

    it.each(unsupported)('answers %s with 415', async (name, call) => {
      const res = await call(a);
      if (ownAnswer(name)) {
        expect(res.status).toBe(415);
        return;
      }
      expect({ status: res.status, body: res.body }).toEqual({
        status: 415,
        body: {
          statusCode: 415,
          error: 'Unsupported Media Type',
          message: expect.stringContaining('Content-Type: application/json'),
        },
      });
      expect(res.headers['cache-control']).toBe('no-store');
    });

    // PostgreSQL refuses a NUL in text (a 500 it was), and every SQL store and Redis turn a lone
    // surrogate into U+FFFD, which would match a different dead letter than the one asked for.
    const nul = 'order\\u0000placed';
    const surrogate = 'order\\ud800';
    type Unreadable = [name: string, field: string, call: (a: AdminApp) => Promise<Response>];
    const unreadable: Unreadable[] = [
      ...(['type', 'handler', 'key'] as const).flatMap((field): Unreadable[] => [
        [`a list with a NUL in ${field}`, field, (a) => list(a, `?${field}=a%00b`)],
        [
          `a summary with a NUL in ${field}`,
          field,
          (a) => a.http.get(`/outbox/dead-letters/summary?${field}=%00`).set(key),
        ],
        ...(['purge', 'replay'] as const).flatMap((route): Unreadable[] => [
          [
            `${route} with a NUL in filter.${field}`,
            `filter.${field}`,
            (a) => postJson(a, route, `{"filter": {"${field}": "${nul}"}}`),
          ],
          [
            `${route} with a lone surrogate in filter.${field}`,
            `filter.${field}`,
            (a) => postJson(a, route, `{"filter": {"${field}": "${surrogate}"}, "all": true}`),
          ],
        ]),
      ]),
      ['a list with a NUL in the cursor', 'cursor', (a) => list(a, '?cursor=abc%00')],
      [
        'a list with a NUL in failedBefore',
        'failedBefore',
        (a) => list(a, '?failedBefore=2026-01-01T00:00:00Z%00'),
      ],
      ['a list with a NUL in limit', 'limit', (a) => list(a, '?limit=5%00')],
      [
        'a purge with a NUL in an id',
        'ids[1]',
        (a) => postJson(a, 'purge', `{"ids": ["${items[0].id}", "${items[1].id}\\u0000"]}`),
      ],
      [
        'a replay with a lone surrogate in an id',
        'ids[0]',
        (a) => postJson(a, 'replay', `{"ids": ["${items[0].id}\\udfff"]}`),
      ],
      [
        'a replay with a NUL in availableAt',
        'availableAt',
        (a) => postJson(a, 'replay', `{"ids": ["${items[0].id}"], "availableAt": "2030\\u0000"}`),
      ],
      [
        'a single replay with a NUL in availableAt',
        'availableAt',
        (a) => postJson(a, `${items[0].id}/replay`, '{"availableAt": "\\u0000"}'),
      ],
      [
        'a single replay with a NUL in the path id',
        'id',
        (a) => a.http.post(`/outbox/dead-letters/${items[0].id}%00/replay`).set(write).send(noBody),
      ],
      [
        'a get with a NUL in the path id',
        'id',
        (a) => a.http.get('/outbox/dead-letters/%00').set(key),
      ],
      [
        'a body with a NUL in a field name',
        'filter',
        (a) => postJson(a, 'purge', `{"filter": {"ty\\u0000pe": "order.placed"}}`),
      ],
    ];

    it.each(unreadable)('answers %s with 400 naming %s', async (_name, field, call) => {
      const res = await call(a);
      expect({ status: res.status, error: res.body.error }).toEqual({
        status: 400,
        error: 'Bad Request',
      });
      expect(res.headers['cache-control']).toBe('no-store');
      expect(JSON.stringify(res.body.message)).toContain(field);
    });

    it.each(bad)('answers %s with %i', async (name, status, call) => {
      const res = await call(a);
      expect(res.status).toBe(status);
      if (ownAnswer(name)) return;
      expect(res.headers['cache-control']).toBe('no-store');
      expect(res.body).toMatchObject({ statusCode: status, message: expect.anything() });
      expect(JSON.stringify(res.body)).not.toMatch(
        /"stack"|\n\s+at |SELECT |INSERT INTO|UPDATE |DELETE FROM/,
      );
    });
  });
}
