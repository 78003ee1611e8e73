import { randomUUID } from 'node:crypto';
import { beforeEach, describe, expect, it } from '@jest/globals';
import { errorFingerprint } from '../../stores/store-helpers';
import type { OutboxStore } from '../../interfaces/outbox-store.interface';
import { ContractKit } from './kit';

/** Retries by the store clock; dead letters: history, reasons, paging and the summary. */
export function retriesAndDeadLettersContract(k: ContractKit): void {
  const { event, claim, err, advance, A, leaseMs, makeDead } = k;
  let store: OutboxStore;
  beforeEach(() => {
    store = k.store;
  });

  describe('retry', () => {
    it('schedules a retry by the store clock and counts attempts', async () => {
      await store.append([event({ handlers: ['A.handle'] })]);
      const [c] = await claim([A]);
      const since = performance.now();
      await store.retry(c.lease, k.aheadMs, err(1));
      await k.notYet(since, async () => {
        expect(await claim([A])).toHaveLength(0);
        expect(await store.stats()).toMatchObject({ pending: 1, due: 0 });
      });
      expect((await store.stats()).pending).toBe(1);
      await advance(k.aheadMs + 50);
      const [again] = await claim([A]);
      expect(again.attempt).toBe(2);
    });
  });

  describe('dead letters', () => {
    it('keeps the error history and is never claimed again on its own', async () => {
      const { event: e, deliveryId } = await makeDead({ key: 'k1', headers: { h: 'v' } });
      expect(await claim([A])).toHaveLength(0);
      const dl = await store.getDeadLetter(deliveryId);
      expect(dl).toMatchObject({
        id: deliveryId,
        eventId: e.id,
        type: 't.one',
        key: 'k1',
        handler: 'A.handle',
        attempts: 2,
        reason: 'exhausted',
        payload: e.payload,
        headers: { h: 'v' },
      });
      expect(dl!.errors.map((x) => [x.message, x.attempt])).toEqual([
        ['first failure', 1],
        ['order 42 not found', 2],
      ]);
      expect(dl!.errors[0].at).toBeInstanceOf(Date);
      expect(dl!.deadAt).toBeInstanceOf(Date);
      expect(await store.getDeadLetter(randomUUID())).toBeNull();
      await advance(leaseMs + 50);
      expect(await claim([A])).toHaveLength(0);
      expect((await store.stats()).dead).toBe(1);
    });

    it('records reason rejected', async () => {
      await store.append([event({ handlers: ['A.handle'] })]);
      const [c] = await claim([A]);
      await store.deadLetter(c.lease, 'rejected', {
        name: 'NonRetryableError',
        message: 'bad',
        attempt: 1,
        workerId: 'w1',
      });
      expect(await store.getDeadLetter(c.id)).toMatchObject({ reason: 'rejected', attempts: 1 });
    });

    it('pages through dead letters with a keyset cursor, no gaps or repeats', async () => {
      const ids = new Set<string>();
      for (let i = 0; i < 23; i++)
        ids.add((await makeDead({ type: i % 2 ? 't.one' : 't.two' })).deliveryId);
      const seen: string[] = [];
      let cursor: string | undefined;
      let pages = 0;
      do {
        const page = await store.listDeadLetters({ limit: 10, cursor });
        seen.push(...page.items.map((d) => d.id));
        cursor = page.nextCursor ?? undefined;
        pages++;
      } while (cursor && pages < 10);
      expect(pages).toBe(3);
      expect(seen).toHaveLength(23);
      expect(new Set(seen)).toEqual(ids);
      const filtered = await store.listDeadLetters({ limit: 100, type: 't.one' });
      expect(filtered.items).toHaveLength(11);
      expect(filtered.nextCursor).toBeNull();
      expect(filtered.items.every((d) => d.type === 't.one')).toBe(true);
    });

    it('summarizes dead letters by type, handler and error fingerprint', async () => {
      await makeDead({ type: 't.one' });
      await makeDead({ type: 't.one' });
      await makeDead({ type: 't.two' });
      const rows = await store.summarizeDeadLetters({});
      expect(rows).toEqual(
        expect.arrayContaining([
          expect.objectContaining({
            type: 't.one',
            handler: 'A.handle',
            errorName: 'Error',
            count: 2,
          }),
          expect.objectContaining({ type: 't.two', handler: 'A.handle', count: 1 }),
        ]),
      );
      expect(rows[0].fingerprint).toBe('order <n> not found');
    });

    it('summarizes by the last error exactly as the dead letter stores it, whatever its text', async () => {
      // The SQL stores read the last error out of the JSON history in SQL: escapes, non-ASCII
      // text and JSON-looking text must come out as the dead letter itself shows them.
      const texts = [
        'quote " backslash \\ slash / newline \n tab \t',
        'ünïcødé 日本語 😀 4711',
        '{"looks":"like json"}',
        '[]',
        '123',
        'null',
        `order ${randomUUID()} failed ${'x'.repeat(300)} 42`,
      ];
      const expected = new Map<string, number>();
      for (const text of texts) {
        const e = event({ type: 't.text', handlers: [A.name] });
        await store.append([e]);
        const [c] = await claim([A]);
        await store.retry(c.lease, 0, err(1, 'an earlier failure'));
        const [c2] = await claim([A]);
        await store.deadLetter(c2.lease, 'rejected', {
          name: text.slice(0, 40),
          message: text,
          attempt: 2,
          workerId: 'w1',
        });
        const last = (await store.getDeadLetter(c.id))!.errors.at(-1)!;
        expect([last.name, last.message]).toEqual([text.slice(0, 40), text]);
        const k = JSON.stringify([last.name, errorFingerprint(last.message)]);
        expected.set(k, (expected.get(k) ?? 0) + 1);
      }
      const rows = await store.summarizeDeadLetters({ type: 't.text' });
      expect(
        new Map(rows.map((r) => [JSON.stringify([r.errorName, r.fingerprint]), r.count])),
      ).toEqual(expected);
      expect(rows.every((r) => r.type === 't.text' && r.handler === A.name)).toBe(true);
    });
  });
}
