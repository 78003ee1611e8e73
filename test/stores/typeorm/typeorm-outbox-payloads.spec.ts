import { randomUUID } from 'node:crypto';
import { expect, it } from '@jest/globals';
import {
  AppendableEvent,
  HandlerSubscription,
} from '../../../lib/interfaces/outbox-store.interface';
import { DEFAULT_LIMITS } from '../../../lib/outbox-options';
import { validateEvent } from '../../../lib/outbox-validation';
import { describeWithService } from '../../support/services';
import { SERVICE_OF, TestDialect, useTables } from './typeorm-test-helpers';

const A: HandlerSubscription = { name: 'A.handle', types: ['big.event'] };
const MiB = 1024 * 1024;

/** A payload of at least `bytes` serialized UTF-8 bytes, mixing 1- to 4-byte characters. */
function bigPayload(bytes: number, seed: number): Record<string, unknown> {
  const unit = `héllo wörld — 日本語 🎉 "quoted" \\ back\\slash \n\t${seed} `;
  const text = unit.repeat(Math.ceil(bytes / Buffer.byteLength(unit, 'utf8')));
  return { seed, text, nested: { list: [1, 2.5, null, true, 'ü'], emoji: '👩‍👩‍👧‍👦' } };
}

function event(payload: unknown): AppendableEvent {
  return {
    id: randomUUID(),
    type: 'big.event',
    payload,
    key: null,
    headers: { note: 'ünïcödé ✓' },
    occurredAt: new Date(),
    availableAt: null,
    handlers: ['A.handle'],
  };
}

function payloadsOn(dialect: TestDialect): void {
  const t = useTables(dialect, 'p');

  it('round-trips payloads over 1 MiB with unicode unchanged, several in one append', async () => {
    const events = [1, 2, 3, 4, 5].map((seed) => event(bigPayload(MiB + 1, seed)));
    expect(Buffer.byteLength(JSON.stringify(events[0].payload), 'utf8')).toBeGreaterThan(MiB);
    const stored = await t.tables.store.append(events);
    expect(stored.map((e) => e.id)).toEqual(events.map((e) => e.id));
    const claimed = await t.tables.store.claim({
      workerId: 'w',
      handlers: [A],
      limit: 10,
      leaseMs: 30_000,
    });
    expect(claimed.map((c) => c.event.id)).toEqual(events.map((e) => e.id));
    claimed.forEach((c, i) => {
      expect(JSON.stringify(c.event.payload)).toBe(JSON.stringify(events[i].payload));
      expect(c.event.headers).toEqual(events[i].headers);
    });
    // Appending the same big event again is recognized as identical (SPEC §2.10).
    const again = await t.tables.store.append([events[0]]);
    expect(again[0].id).toBe(events[0].id);
  }, 30_000);

  /** Claims what is due for `A` and returns each claimed event's payload by event id. */
  async function claimedPayloads(workerId: string): Promise<Map<string, unknown>> {
    const claimed = await t.tables.store.claim({
      workerId,
      handlers: [A],
      limit: 10,
      leaseMs: 30_000,
    });
    return new Map(claimed.map((c) => [c.event.id, c.event.payload]));
  }

  it('writes the JSON text the service serialized and returns its parse, one event and several', async () => {
    // The service validates by serializing; the store writes that text rather than serializing
    // again, and returns the payload the service parsed from it.
    const validated = (payload: unknown): AppendableEvent => {
      const e = validateEvent({ type: 'big.event', payload }, DEFAULT_LIMITS, 'event');
      e.handlers = ['A.handle'];
      return e;
    };
    const one = validated({ n: 1, big: 1.5e300, s: 'ü "q" \\', at: new Date(0) });
    const many = [validated({ n: 2 }), validated(null), validated(['x', { y: [1.5] }])];
    const [storedOne] = await t.tables.store.append([one]);
    const storedMany = await t.tables.store.append(many);
    expect(storedOne.payload).toBe(one.payload);
    expect(storedMany.map((e) => e.payload)).toEqual(many.map((e) => e.payload));
    const byId = await claimedPayloads('w2');
    for (const e of [one, ...many]) expect(byId.get(e.id)).toEqual(e.payload);
  });

  it('a store wrapper that copies the event with another payload has that payload stored, and appending the copy again is a no-op', async () => {
    // e.g. a wrapper that encrypts or redacts payloads before the built-in store writes them
    const original = validateEvent(
      { type: 'big.event', payload: { card: '4242 4242 4242 4242' } },
      DEFAULT_LIMITS,
      'event',
    );
    original.handlers = ['A.handle'];
    const redacted: AppendableEvent = { ...original, payload: { card: '****' } };
    const [stored] = await t.tables.store.append([redacted]);
    expect(stored.payload).toEqual({ card: '****' });
    const again = await t.tables.store.append([{ ...original, payload: { card: '****' } }]);
    expect(again[0].payload).toEqual({ card: '****' });
    // The same event object with its payload replaced is serialized anew too.
    const inPlace = validateEvent({ type: 'big.event', payload: { v: 1 } }, DEFAULT_LIMITS, 'e');
    inPlace.handlers = ['A.handle'];
    inPlace.payload = { v: 2 };
    await t.tables.store.append([inPlace]);
    const byId = await claimedPayloads('w3');
    expect(byId.get(original.id)).toEqual({ card: '****' });
    expect(byId.get(inPlace.id)).toEqual({ v: 2 });
  });
}

describe('typeorm large payloads [sqlite]', () => payloadsOn('sqlite'));
describeWithService(SERVICE_OF.postgres, 'typeorm large payloads', () => payloadsOn('postgres'));
describeWithService(SERVICE_OF.mariadb, 'typeorm large payloads', () => payloadsOn('mariadb'));
