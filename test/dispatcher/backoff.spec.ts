import { backoffDelay } from '../../lib/dispatcher/backoff';

describe('backoffDelay', () => {
  const defaults = { initialMs: 1_000, factor: 2, maxMs: 300_000, jitter: 0 };

  it('doubles from 1 s and caps at 5 min by default', () => {
    expect([1, 2, 3, 4].map((a) => backoffDelay(a, defaults))).toEqual([
      1_000, 2_000, 4_000, 8_000,
    ]);
    expect(backoffDelay(10, defaults)).toBe(300_000);
    expect(backoffDelay(50, defaults)).toBe(300_000);
  });

  it('spreads by ± jitter and never exceeds the cap', () => {
    const options = { ...defaults, jitter: 0.2 };
    expect(backoffDelay(1, options, () => 0)).toBe(800);
    expect(backoffDelay(1, options, () => 1)).toBe(1_200);
    expect(backoffDelay(20, options, () => 1)).toBe(300_000);
  });
});
