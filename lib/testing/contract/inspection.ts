import { randomUUID } from 'node:crypto';
import { beforeEach, describe, expect, it } from '@jest/globals';
import type { OutboxStore } from '../../interfaces/outbox-store.interface';
import { ContractKit } from './kit';

/**
 * Error stacks in the history, and the optional read-only views the admin API uses (deliveries
 * by state, one event, events of a key, the catalog): each is checked when the store has it.
 */
export function inspectionContract(k: ContractKit): void {
  const { event, claim, err, advance, A, B, makeDead } = k;
  let store: OutboxStore;
  beforeEach(() => {
    store = k.store;
  });
  const handlers = [A.name, B.name];

  describe('error stacks', () => {
    it('keeps a failure stack with its message, and none when none is given', async () => {
      const e = event({ handlers: [A.name] });
      await store.append([e]);
      const [c] = await claim([A]);
      const stack = 'Error: boom\n    at handle (orders.ts:1:1)\n    at run (x.ts:2:2)';
      await store.retry(c.lease, 0, { ...err(1), stack });
      const [c2] = await claim([A]);
      await store.deadLetter(c2.lease, 'exhausted', err(2, 'again'));
      const dl = await store.getDeadLetter(c.id);
      expect(dl!.errors[0]).toMatchObject({ message: 'boom', stack });
      expect(dl!.errors[1].message).toBe('again');
      expect(dl!.errors[1]).not.toHaveProperty('stack');
    });
  });

  describe('listDeliveries', () => {
    it('lists retrying, scheduled and leased deliveries, each with its own fields', async () => {
      if (!store.listDeliveries) return;
      const now = await store.now();
      const later = new Date(now.getTime() + 3_600_000);
      const retrying = event({ handlers: [A.name], key: 'k1' });
      const leased = event({ handlers: [B.name] });
      const scheduled = event({ handlers: [A.name], availableAt: later, type: 't.two' });
      await store.append([retrying]);
      const [r] = await claim([A]);
      await store.retry(r.lease, 3_600_000, { ...err(1, 'no stock'), stack: 'Error: no stock' });
      await store.append([leased, scheduled]);
      const [l] = await claim([B], 10, 'worker-9', 60_000);

      const retryingPage = await store.listDeliveries({ state: 'retrying', limit: 10 });
      expect(retryingPage.items).toHaveLength(1);
      expect(retryingPage.items[0]).toMatchObject({
        id: r.id,
        eventId: retrying.id,
        type: 't.one',
        key: 'k1',
        handler: A.name,
        status: 'pending',
        attempts: 1,
        leaseOwner: null,
        leaseUntil: null,
      });
      expect(retryingPage.items[0].errors.map((x) => [x.message, x.stack])).toEqual([
        ['no stock', 'Error: no stock'],
      ]);
      expect(retryingPage.items[0].availableAt.getTime()).toBeGreaterThan(now.getTime());
      expect(retryingPage.nextCursor).toBeNull();

      const scheduledPage = await store.listDeliveries({ state: 'scheduled', limit: 10 });
      expect(scheduledPage.items.map((d) => [d.eventId, d.handler, d.attempts])).toEqual([
        [scheduled.id, A.name, 0],
      ]);
      expect(scheduledPage.items[0].availableAt.toISOString()).toBe(later.toISOString());

      const leasedPage = await store.listDeliveries({ state: 'leased', limit: 10, handlers });
      expect(leasedPage.items).toHaveLength(1);
      expect(leasedPage.items[0]).toMatchObject({
        id: l.id,
        eventId: leased.id,
        handler: B.name,
        status: 'leased',
        attempts: 1,
        leaseOwner: 'worker-9',
      });
      expect(leasedPage.items[0].leaseUntil!.getTime()).toBe(l.lease.leaseUntil.getTime());

      expect(
        (await store.listDeliveries({ state: 'scheduled', limit: 10, type: 't.one' })).items,
      ).toHaveLength(0);
      expect(
        (await store.listDeliveries({ state: 'retrying', limit: 10, handler: B.name })).items,
      ).toHaveLength(0);
    });

    it('pages by keyset without gaps or repeats; an expired lease is not listed as leased', async () => {
      if (!store.listDeliveries) return;
      const now = await store.now();
      const events = Array.from({ length: 5 }, (_, i) =>
        event({ handlers: [A.name], availableAt: new Date(now.getTime() + 3_600_000 + i) }),
      );
      await store.append(events);
      const seen: string[] = [];
      let cursor: string | undefined;
      for (let pages = 0; pages < 10; pages++) {
        const page = await store.listDeliveries({ state: 'scheduled', limit: 2, cursor });
        seen.push(...page.items.map((d) => d.eventId));
        if (!page.nextCursor) break;
        cursor = page.nextCursor;
      }
      expect(seen).toEqual(events.map((e) => e.id));

      await store.append([event({ handlers: [B.name] })]);
      await claim([B], 10, 'w1', 50);
      await advance(100);
      expect((await store.listDeliveries({ state: 'leased', limit: 10, handlers })).items).toEqual(
        [],
      );
    });
  });

  describe('inspectEvent', () => {
    it('shows an event with its open deliveries and dead letters; null when unknown', async () => {
      if (!store.inspectEvent) return;
      const e = event({ key: 'order-1', headers: { h: 'v' } });
      await store.append([e]);
      const [a] = await claim([A]);
      await store.deadLetter(a.lease, 'rejected', {
        ...err(1, 'bad'),
        stack: 'Error: bad\n  at x',
      });
      const record = await store.inspectEvent(e.id, handlers);
      expect(record!.event).toMatchObject({
        id: e.id,
        type: 't.one',
        key: 'order-1',
        payload: e.payload,
        headers: { h: 'v' },
      });
      const byHandler = Object.fromEntries(record!.deliveries.map((d) => [d.handler, d]));
      expect(Object.keys(byHandler).sort()).toEqual([A.name, B.name]);
      expect(byHandler[A.name]).toMatchObject({ id: a.id, status: 'dead', attempts: 1 });
      expect(byHandler[A.name].errors[0]).toMatchObject({
        message: 'bad',
        stack: 'Error: bad\n  at x',
      });
      expect(byHandler[B.name]).toMatchObject({ status: 'pending', attempts: 0, errors: [] });

      const [b] = await claim([B]);
      await store.ack(b.lease);
      const after = await store.inspectEvent(e.id, handlers);
      expect(after!.deliveries.map((d) => d.handler)).toEqual([A.name]);
      expect(await store.inspectEvent(randomUUID(), handlers)).toBeNull();
    });
  });

  describe('listEventsByKey', () => {
    it('lists the events of a key newest first, paged, with their deliveries', async () => {
      if (!store.listEventsByKey) return;
      const key = `key-${randomUUID()}`;
      const events = Array.from({ length: 3 }, () => event({ key, handlers: [A.name] }));
      for (const e of events) await store.append([e]);
      await store.append([event({ key: 'other', handlers: [A.name] })]);
      const first = await store.listEventsByKey({ key, limit: 2, handlers });
      expect(first.items.map((r) => r.event.id)).toEqual([events[2].id, events[1].id]);
      expect(first.items[0].deliveries.map((d) => [d.handler, d.status])).toEqual([
        [A.name, 'pending'],
      ]);
      const second = await store.listEventsByKey({
        key,
        limit: 2,
        handlers,
        cursor: first.nextCursor!,
      });
      expect(second.items.map((r) => r.event.id)).toEqual([events[0].id]);
      expect(second.nextCursor).toBeNull();
      expect((await store.listEventsByKey({ key: 'none', limit: 5, handlers })).items).toEqual([]);
    });
  });

  describe('catalog', () => {
    it('names the types and handlers of open deliveries and dead letters', async () => {
      if (!store.catalog) return;
      await store.append([event({ type: 't.two', handlers: [A.name] })]);
      await makeDead({}, B);
      const catalog = await store.catalog(100);
      expect(catalog.types).toEqual(['t.one', 't.two']);
      expect(catalog.handlers).toEqual([
        { name: A.name, types: ['t.two'] },
        { name: B.name, types: ['t.one'] },
      ]);
    });
  });

  describe('backlog', () => {
    it('counts due pending deliveries per handler with the oldest due time', async () => {
      if (!store.backlog) return;
      const now = await store.now();
      await store.append([event()]);
      await store.append([event({ handlers: [A.name] })]);
      await store.append([
        event({ handlers: [B.name], availableAt: new Date(now.getTime() + 3_600_000) }),
      ]);
      const rows = await store.backlog(1000);
      const byHandler = Object.fromEntries(rows.map((r) => [r.handler, r]));
      expect(byHandler[A.name].pending).toBe(2);
      expect(byHandler[B.name].pending).toBe(1);
      expect(byHandler[A.name].oldestDueAt!.getTime()).toBeLessThanOrEqual(
        (await store.now()).getTime(),
      );
    });
  });
}
