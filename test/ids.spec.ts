import { afterEach, describe, expect, it, jest } from '@jest/globals';
import { newId } from '../lib/ids';

const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
/** The millisecond timestamp a version 7 id starts with. */
const msOf = (id: string) => parseInt(id.slice(0, 8) + id.slice(9, 13), 16);

describe('newId (UUID version 7)', () => {
  afterEach(() => {
    jest.restoreAllMocks();
  });

  it('is a version 7, variant 1 UUID carrying the current millisecond', () => {
    const before = Date.now();
    const id = newId();
    const after = Date.now();
    expect(id).toMatch(V7);
    expect(msOf(id)).toBeGreaterThanOrEqual(before);
    expect(msOf(id)).toBeLessThanOrEqual(after + 1);
  });

  it('sorts in the order the ids were made, and never repeats', () => {
    const ids = Array.from({ length: 50_000 }, () => newId());
    expect(ids.filter((id, i) => i > 0 && id <= ids[i - 1])).toEqual([]);
    expect(new Set(ids).size).toBe(ids.length);
    for (const id of ids.slice(0, 100)) expect(id).toMatch(V7);
  });

  it('stays in order within one millisecond past the counter, and when the clock goes back', () => {
    const frozen = Date.now() + 60_000;
    const now = jest.spyOn(Date, 'now').mockReturnValue(frozen);
    const burst = Array.from({ length: 5_000 }, () => newId());
    expect(burst.filter((id, i) => i > 0 && id <= burst[i - 1])).toEqual([]);
    // Over 2,048 ids in a millisecond borrow the next one (RFC 9562), at most a few ahead.
    expect(msOf(burst[0])).toBe(frozen);
    expect(msOf(burst[burst.length - 1])).toBeGreaterThan(frozen);
    expect(msOf(burst[burst.length - 1])).toBeLessThanOrEqual(frozen + 3);
    now.mockReturnValue(frozen - 10_000);
    const later = newId();
    expect(later > burst[burst.length - 1]).toBe(true);
    expect(later).toMatch(V7);
  });

  // Last: the generator keeps the latest millisecond it used, and this one is ahead of the others.
  it('is well formed whatever Date.now returns (a mocked clock may give a fraction)', () => {
    const at = Date.now() + 120_000.75;
    jest.spyOn(Date, 'now').mockReturnValue(at);
    const id = newId();
    expect(id).toMatch(V7);
    expect(msOf(id)).toBe(Math.floor(at));
  });
});
