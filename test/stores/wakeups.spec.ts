import { CoalescedSignal, reconnectDelay, WAKEUP_COALESCE_MS } from '../../lib/stores/wakeups';
import { deferred } from '../support/outbox-app';

/** Producers pay almost nothing: at most one signal per window, whatever the append rate. */
describe('CoalescedSignal', () => {
  beforeEach(() => jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate'] }));
  afterEach(() => jest.useRealTimers());

  const flush = async (ms = 0) => {
    await jest.advanceTimersByTimeAsync(ms);
    for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
  };

  it('sends the first signal of a quiet spell at once', () => {
    const send = jest.fn(() => Promise.resolve());
    new CoalescedSignal(send, () => undefined).signal();
    expect(send).toHaveBeenCalledTimes(1);
  });

  it('turns a burst within one window into one trailing signal', async () => {
    const send = jest.fn(() => Promise.resolve());
    const signal = new CoalescedSignal(send, () => undefined);
    for (let i = 0; i < 1_000; i++) signal.signal();
    expect(send).toHaveBeenCalledTimes(1);
    await flush(WAKEUP_COALESCE_MS);
    expect(send).toHaveBeenCalledTimes(2);
    await flush(WAKEUP_COALESCE_MS * 10);
    expect(send).toHaveBeenCalledTimes(2); // nothing more was asked for
  });

  it('sends at most one signal per window under a steady stream', async () => {
    const send = jest.fn(() => Promise.resolve());
    const signal = new CoalescedSignal(send, () => undefined);
    for (let ms = 0; ms < 100; ms++) {
      signal.signal();
      await flush(1);
    }
    expect(send.mock.calls.length).toBeLessThanOrEqual(100 / WAKEUP_COALESCE_MS + 1);
    expect(send.mock.calls.length).toBeGreaterThanOrEqual(100 / WAKEUP_COALESCE_MS - 1);
  });

  it('never overlaps a signal still being sent (a slow pool does not pile them up)', async () => {
    const slow = deferred<void>();
    const send = jest.fn(() => slow.promise);
    const signal = new CoalescedSignal(send, () => undefined);
    signal.signal();
    signal.signal();
    await flush(WAKEUP_COALESCE_MS * 20);
    expect(send).toHaveBeenCalledTimes(1);
    slow.resolve();
    await flush(0);
    expect(send).toHaveBeenCalledTimes(2);
  });

  it('reports a failed send and keeps signalling', async () => {
    const errors: unknown[] = [];
    const send = jest.fn().mockRejectedValueOnce(new Error('down')).mockResolvedValue(undefined);
    const signal = new CoalescedSignal(send, (e) => errors.push(e));
    signal.signal();
    await flush(WAKEUP_COALESCE_MS);
    signal.signal();
    expect(send).toHaveBeenCalledTimes(2);
    expect(errors).toHaveLength(1);
  });

  it('sends nothing after close', async () => {
    const send = jest.fn(() => Promise.resolve());
    const signal = new CoalescedSignal(send, () => undefined);
    signal.signal();
    signal.signal();
    signal.close();
    await flush(WAKEUP_COALESCE_MS * 2);
    signal.signal();
    expect(send).toHaveBeenCalledTimes(1);
  });
});

describe('reconnectDelay', () => {
  it('doubles from 100 ms and stays at 5 s', () => {
    expect([0, 1, 2, 3].map(reconnectDelay)).toEqual([100, 200, 400, 800]);
    expect(reconnectDelay(10)).toBe(5_000);
    expect(reconnectDelay(1_000)).toBe(5_000);
  });
});
