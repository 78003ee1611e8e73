import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { Response } from 'supertest';
import { NonRetryableError, OutboxEvent, OutboxHandler } from 'nestjs-outbox';
import { AdminApp, API_KEY, createAdminApp } from './admin-app';
import { AdminStoreHarness } from './admin-api.suite';

const key = { 'x-api-key': API_KEY };
const write = { ...key, 'Content-Type': 'application/json' };
const HOUR = 3_600_000;

/** Fails with a stack and retries an hour later: a retrying delivery after one drain. */
@Injectable()
export class Stock {
  @OutboxHandler('stock.reserved', {
    maxAttempts: 5,
    backoff: { initialMs: HOUR, maxMs: HOUR, jitter: 0 },
  })
  onReserved(event: OutboxEvent<{ n: number }>) {
    throw new Error(`stock ${event.payload.n} unavailable`);
  }
}

/** Two errors of one handler: `declined` (n < 100) and a gateway timeout, both dead at once. */
@Injectable()
export class Payments {
  @OutboxHandler('payment.failed')
  onFailed(event: OutboxEvent<{ n: number }>) {
    if (event.payload.n < 100) throw new NonRetryableError(`payment ${event.payload.n} declined`);
    throw new NonRetryableError(`gateway timeout after ${event.payload.n} ms`);
  }
}

/** Succeeds: delivered. */
@Injectable()
export class Audit {
  @OutboxHandler('stock.reserved')
  @OutboxHandler('order.placed')
  onAny() {
    return undefined;
  }
}

const NEW_ROUTES: Array<[string, string]> = [
  ['get', '/outbox/deliveries?state=retrying'],
  ['get', `/outbox/events/${randomUUID()}`],
  ['get', '/outbox/events?key=k'],
  ['get', '/outbox/catalog'],
  ['get', '/outbox/throughput'],
  ['get', '/outbox/dead-letters?fingerprint=x'],
  ['get', '/outbox/dead-letters/summary?errorName=Error'],
  ['post', '/outbox/dead-letters/replay'],
  ['post', '/outbox/dead-letters/purge'],
];

/** The console routes of the admin API (issue 28) against one store. */
export function describeAdminConsole(harness: AdminStoreHarness): void {
  let t: AdminApp | undefined;
  async function open(): Promise<AdminApp> {
    t = await createAdminApp({
      store: await harness.store(),
      platform: harness.platform,
      providers: [Stock, Payments, Audit],
    });
    return t;
  }
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  describe('deliveries', () => {
    it('lists retrying (attempt, next attempt, last error with stack), scheduled and leased deliveries', async () => {
      const a = await open();
      const [stock] = await a.outbox.append([
        { type: 'stock.reserved', key: 'sku-1', payload: { n: 7 } },
      ]);
      await a.dispatcher.drain();
      const later = new Date(Date.now() + 2 * HOUR);
      const [scheduled] = await a.outbox.append([
        { type: 'user.created', payload: { n: 1 }, availableAt: later },
      ]);
      const [order] = await a.outbox.append([
        { type: 'order.placed', key: 'o1', payload: { n: 2 } },
      ]);
      const [lease] = await a.store.claim({
        workerId: 'worker-7',
        handlers: [{ name: 'Billing.onOrder', types: ['order.placed'] }],
        limit: 1,
        leaseMs: 60_000,
      });

      const retrying = await a.http
        .get('/outbox/deliveries')
        .set(key)
        .query({ state: 'retrying' })
        .expect(200);
      expect(retrying.body.nextCursor).toBeNull();
      expect(retrying.body.items).toHaveLength(1);
      const item = retrying.body.items[0];
      expect(item).toMatchObject({
        eventId: stock.id,
        type: 'stock.reserved',
        key: 'sku-1',
        handler: 'Stock.onReserved',
        state: 'retrying',
        attempt: 1,
        leaseOwner: null,
        leaseUntil: null,
        lastError: { name: 'Error', message: 'stock 7 unavailable' },
      });
      expect(Date.parse(item.availableAt)).toBeGreaterThan(Date.now() + HOUR / 2);
      expect(item.lastError.stack).toMatch(/^Error: stock 7 unavailable\n\s+at /);
      expect(item.lastError.stack.split('\n').length).toBeLessThanOrEqual(10);

      const sched = await a.http
        .get('/outbox/deliveries')
        .set(key)
        .query({ state: 'scheduled' })
        .expect(200);
      expect(
        sched.body.items.map((d: { eventId: string; state: string; attempt: number }) => [
          d.eventId,
          d.state,
          d.attempt,
        ]),
      ).toEqual([[scheduled.id, 'scheduled', 0]]);
      expect(sched.body.items[0].availableAt).toBe(later.toISOString());
      expect(sched.body.items[0].lastError).toBeNull();

      const leased = await a.http
        .get('/outbox/deliveries')
        .set(key)
        .query({ state: 'leased' })
        .expect(200);
      expect(leased.body.items).toEqual([
        expect.objectContaining({
          id: lease.id,
          eventId: order.id,
          handler: 'Billing.onOrder',
          state: 'leased',
          attempt: 1,
          leaseOwner: 'worker-7',
          leaseUntil: lease.lease.leaseUntil.toISOString(),
        }),
      ]);

      // Filters narrow; a filter matching nothing is an empty page.
      const byType = await a.http
        .get('/outbox/deliveries')
        .set(key)
        .query({ state: 'retrying', type: 'order.placed' })
        .expect(200);
      expect(byType.body.items).toEqual([]);
      const byHandler = await a.http
        .get('/outbox/deliveries')
        .set(key)
        .query({ state: 'leased', handler: 'Billing.onOrder' })
        .expect(200);
      expect(byHandler.body.items).toHaveLength(1);
    });

    it('pages with a keyset cursor, no gaps or repeats', async () => {
      const a = await open();
      const base = Date.now() + HOUR;
      const events = await a.outbox.append(
        Array.from({ length: 5 }, (_, i) => ({
          type: 'user.created',
          payload: { n: i },
          availableAt: new Date(base + i * 1000),
        })),
      );
      const seen: string[] = [];
      let cursor: string | null = null;
      do {
        const res: Response = await a.http
          .get('/outbox/deliveries')
          .set(key)
          .query({ state: 'scheduled', limit: 2, ...(cursor ? { cursor } : {}) })
          .expect(200);
        expect(res.body.items.length).toBeLessThanOrEqual(2);
        seen.push(...res.body.items.map((d: { eventId: string }) => d.eventId));
        cursor = res.body.nextCursor;
      } while (cursor);
      expect(seen).toEqual(events.map((e) => e.id));
    });

    it.each([
      [{}, 'state must be one of retrying, scheduled, leased'],
      [{ state: 'dead' }, 'state must be one of retrying, scheduled, leased'],
      [{ state: 'retrying', limit: 0 }, 'limit must not be less than 1'],
      [{ state: 'retrying', limit: 101 }, 'limit must not be greater than 100'],
      [
        { state: 'retrying', cursor: 'bm9wZQ' },
        'cursor must be a nextCursor returned by a previous page',
      ],
      [{ state: 'retrying', type: '' }, 'type must be longer than or equal to 1 characters'],
      [
        { state: 'retrying', handler: 'h'.repeat(256) },
        'handler must be shorter than or equal to 255 characters',
      ],
      [{ state: 'retrying', bogus: '1' }, 'property bogus should not exist'],
    ])('refuses %j with a 400 naming the field', async (query, message) => {
      const a = await open();
      const res = await a.http.get('/outbox/deliveries').set(key).query(query).expect(400);
      expect(JSON.stringify(res.body.message)).toContain(message);
    });
  });

  describe('events', () => {
    it('shows one event with its state for every handler and the error history', async () => {
      const a = await open();
      const [stock] = await a.outbox.append([
        { type: 'stock.reserved', key: 'sku-2', payload: { n: 3 }, headers: { tenant: 't1' } },
      ]);
      await a.dispatcher.drain();
      const res = await a.http.get(`/outbox/events/${stock.id.toUpperCase()}`).set(key).expect(200);
      expect(res.body.event).toEqual({
        id: stock.id,
        type: 'stock.reserved',
        key: 'sku-2',
        payload: { n: 3 },
        headers: { tenant: 't1' },
        occurredAt: stock.occurredAt.toISOString(),
        availableAt: stock.availableAt.toISOString(),
      });
      const byHandler = Object.fromEntries(
        res.body.deliveries.map((d: { handler: string }) => [d.handler, d]),
      );
      expect(Object.keys(byHandler).sort()).toEqual(['Audit.onAny', 'Stock.onReserved']);
      expect(byHandler['Audit.onAny']).toMatchObject({
        state: 'delivered',
        deliveryId: null,
        errors: [],
      });
      expect(byHandler['Stock.onReserved']).toMatchObject({ state: 'retrying', attempt: 1 });
      expect(byHandler['Stock.onReserved'].errors).toEqual([
        expect.objectContaining({
          name: 'Error',
          message: 'stock 3 unavailable',
          attempt: 1,
          stack: expect.stringMatching(/^Error: stock 3 unavailable\n/),
          workerId: expect.any(String),
          at: expect.any(String),
        }),
      ]);

      const [order] = await a.outbox.append([{ type: 'order.placed', payload: { n: 9 } }]);
      await a.dispatcher.drain();
      const dead = await a.http.get(`/outbox/events/${order.id}`).set(key).expect(200);
      expect(
        dead.body.deliveries.map((d: { handler: string; state: string }) => [d.handler, d.state]),
      ).toEqual([
        ['Audit.onAny', 'delivered'],
        ['Billing.onOrder', 'dead'],
        ['Shipping.onOrder', 'dead'],
      ]);
    });

    it('answers 404 for an unknown event and 400 for an id that is not a UUID', async () => {
      const a = await open();
      const missing = randomUUID();
      const res = await a.http.get(`/outbox/events/${missing}`).set(key).expect(404);
      expect(res.body.message).toBe(`No event with id ${missing}`);
      const bad = await a.http.get('/outbox/events/not-a-uuid').set(key).expect(400);
      expect(JSON.stringify(bad.body.message)).toContain('id must be a UUID');
    });

    it('lists the events of a key newest first, paged, with each handler state', async () => {
      const a = await open();
      const ordering = `cust-${randomUUID()}`;
      const appended = [];
      for (let n = 0; n < 3; n++) {
        appended.push(
          ...(await a.outbox.append([{ type: 'stock.reserved', key: ordering, payload: { n } }])),
        );
      }
      await a.outbox.append([{ type: 'stock.reserved', key: 'other', payload: { n: 9 } }]);
      const first = await a.http
        .get('/outbox/events')
        .set(key)
        .query({ key: ordering, limit: 2 })
        .expect(200);
      expect(first.body.items.map((e: { id: string }) => e.id)).toEqual([
        appended[2].id,
        appended[1].id,
      ]);
      expect(first.body.items[0].handlers).toEqual([
        { handler: 'Audit.onAny', state: 'pending', deliveryId: expect.any(String), attempt: 0 },
        {
          handler: 'Stock.onReserved',
          state: 'pending',
          deliveryId: expect.any(String),
          attempt: 0,
        },
      ]);
      expect(first.body.items[0]).not.toHaveProperty('payload');
      const second = await a.http
        .get('/outbox/events')
        .set(key)
        .query({ key: ordering, limit: 2, cursor: first.body.nextCursor })
        .expect(200);
      expect(second.body.items.map((e: { id: string }) => e.id)).toEqual([appended[0].id]);
      expect(second.body.nextCursor).toBeNull();
    });

    it.each([
      [{}, 'key must be a string'],
      [{ key: '' }, 'key must be longer than or equal to 1 characters'],
      [{ key: 'k', limit: 1001 }, 'limit must not be greater than'],
      [{ key: 'k', cursor: 'x' }, 'cursor must be a nextCursor returned by a previous page'],
    ])('refuses events query %j with a 400 naming the field', async (query, message) => {
      const a = await open();
      const res = await a.http.get('/outbox/events').set(key).query(query).expect(400);
      expect(JSON.stringify(res.body.message)).toContain(message);
    });
  });

  describe('dead letters by error', () => {
    async function seedPayments(a: AdminApp): Promise<void> {
      await a.outbox.append([
        ...Array.from({ length: 12 }, (_, n) => ({ type: 'payment.failed', payload: { n } })),
        ...Array.from({ length: 6 }, (_, n) => ({
          type: 'payment.failed',
          payload: { n: 100 + n },
        })),
      ]);
      await a.dispatcher.drain();
    }

    it('filters, replays and purges exactly one fingerprint of a handler', async () => {
      const a = await open();
      await seedPayments(a);
      const summary = await a.http
        .get('/outbox/dead-letters/summary')
        .set(key)
        .query({ handler: 'Payments.onFailed' })
        .expect(200);
      expect(summary.body.total).toBe(18);
      const declined = summary.body.groups.find((g: { fingerprint: string }) =>
        g.fingerprint.includes('declined'),
      );
      expect(declined).toMatchObject({
        count: 12,
        errorName: 'NonRetryableError',
        fingerprint: 'payment <n> declined',
      });

      const narrowed = await a.http
        .get('/outbox/dead-letters/summary')
        .set(key)
        .query({ fingerprint: declined.fingerprint })
        .expect(200);
      expect(narrowed.body).toEqual({ groups: [declined], total: 12 });

      // Paged listing by fingerprint: exactly the 12, no repeats.
      const ids: string[] = [];
      let cursor: string | null = null;
      do {
        const res: Response = await a.http
          .get('/outbox/dead-letters')
          .set(key)
          .query({ fingerprint: declined.fingerprint, limit: 5, ...(cursor ? { cursor } : {}) })
          .expect(200);
        for (const item of res.body.items) {
          expect(item.errors.at(-1).message).toMatch(/^payment \d+ declined$/);
          expect(item.errors.at(-1).stack).toMatch(/^NonRetryableError: payment \d+ declined/);
        }
        ids.push(...res.body.items.map((i: { id: string }) => i.id));
        cursor = res.body.nextCursor;
      } while (cursor);
      expect(new Set(ids).size).toBe(12);

      const replay = await a.http
        .post('/outbox/dead-letters/replay')
        .set(write)
        .send({ filter: { handler: 'Payments.onFailed', fingerprint: declined.fingerprint } })
        .expect(200);
      expect(replay.body).toEqual({ replayed: 12 });
      expect((await a.store.stats()).dead).toBe(6);

      const purge = await a.http
        .post('/outbox/dead-letters/purge')
        .set(write)
        .send({
          filter: { errorName: 'NonRetryableError', fingerprint: 'gateway timeout after <n> ms' },
        })
        .expect(200);
      expect(purge.body).toEqual({ purged: 6 });
      expect((await a.store.stats()).dead).toBe(0);
    });

    it('refuses a null, too long or mistyped error filter, and an oversized body', async () => {
      const a = await open();
      await a.http
        .post('/outbox/dead-letters/replay')
        .set(write)
        .send({ filter: { fingerprint: null } })
        .expect(400);
      const long = await a.http
        .get('/outbox/dead-letters')
        .set(key)
        .query({ errorName: 'E'.repeat(256) })
        .expect(400);
      expect(JSON.stringify(long.body.message)).toContain(
        'errorName must be shorter than or equal to 255 characters',
      );
      const typed = await a.http
        .post('/outbox/dead-letters/purge')
        .set(write)
        .send({ filter: { fingerprint: 5 } })
        .expect(400);
      expect(JSON.stringify(typed.body.message)).toContain('fingerprint must be a string');
      await a.http
        .post('/outbox/dead-letters/purge')
        .set(write)
        .send({ filter: { fingerprint: 'x'.repeat(70_000) } })
        .expect(413);
    });
  });

  describe('catalog and throughput', () => {
    it('names types and handlers from the registry and the store', async () => {
      const a = await open();
      await a.outbox.append([{ type: 'legacy.type', payload: {} }]);
      const res = await a.http.get('/outbox/catalog').set(key).expect(200);
      expect(res.body.types).toEqual(
        expect.arrayContaining([
          'legacy.type',
          'order.placed',
          'payment.failed',
          'stock.reserved',
          'user.created',
        ]),
      );
      expect(res.body.handlers).toEqual(
        expect.arrayContaining([
          { name: 'Audit.onAny', types: ['order.placed', 'stock.reserved'] },
          { name: 'Payments.onFailed', types: ['payment.failed'] },
        ]),
      );
    });

    it('counts per-minute outcomes of the last hour and the due backlog per handler', async () => {
      const a = await open();
      await a.outbox.append([
        { type: 'stock.reserved', payload: { n: 1 } },
        { type: 'stock.reserved', payload: { n: 2 } },
      ]);
      await a.dispatcher.drain();
      await a.outbox.append([{ type: 'order.placed', payload: { n: 3 } }]);
      const res = await a.http.get('/outbox/throughput').set(key).expect(200);
      const byHandler = Object.fromEntries(
        res.body.handlers.map((h: { handler: string }) => [h.handler, h]),
      );
      for (const h of res.body.handlers) expect(h.minutes).toHaveLength(60);
      const sum = (h: string, field: 'delivered' | 'failed') =>
        byHandler[h].minutes.reduce((s: number, m: Record<string, number>) => s + m[field], 0);
      expect(sum('Audit.onAny', 'delivered')).toBe(2);
      expect(sum('Stock.onReserved', 'failed')).toBe(2);
      expect(byHandler['Billing.onOrder'].lag.pending).toBe(1);
      expect(typeof byHandler['Billing.onOrder'].lag.oldestDueAt).toBe('string');
      expect(byHandler['Stock.onReserved'].lag).toEqual({ pending: 0, oldestDueAt: null });
      const last = byHandler['Audit.onAny'].minutes[59];
      expect(Date.parse(last.at)).toBeLessThanOrEqual(Date.now());
      expect(Date.now() - Date.parse(last.at)).toBeLessThan(60_000);
    });
  });

  describe('guards', () => {
    it('answers 403 on every new route to a caller without the key', async () => {
      const a = await open();
      for (const [method, path] of NEW_ROUTES) {
        const req =
          method === 'get'
            ? a.http.get(path)
            : a.http
                .post(path)
                .set('Content-Type', 'application/json')
                .send({ filter: { fingerprint: 'x' } });
        const res = await req.set('x-api-key', 'wrong');
        expect([method, path, res.status]).toEqual([method, path, 403]);
      }
    });
  });
}
