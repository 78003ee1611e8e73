/** Counters of one dispatcher since it started. */
export interface OutboxDispatcherStats {
  workerId: string;
  running: boolean;
  paused: boolean;
  inFlight: number;
  claimed: number;
  succeeded: number;
  /** Failed attempts (thrown errors and timeouts). */
  failed: number;
  retried: number;
  deadLettered: number;
  leaseLost: number;
  /**
   * Runs given up on (timeout, lease lost, shutdown) whose handler, ignoring its aborted signal,
   * was still running a turn later (docs/handlers.md).
   */
  abandoned: number;
  /** Of those, the ones still running now (JavaScript cannot stop them). */
  abandonedRunning: number;
  storeErrors: number;
  /**
   * Wake-ups received from other processes (and from the wake-up subscription reconnecting),
   * see docs/wakeups.md.
   */
  wakeups: number;
  /** Claims started to serve a wake-up, local or from another process: a burst costs one. */
  wakeupClaims: number;
  lastPollAt: Date | null;
  lastStoreError: string | null;
}

/** The counters the dispatcher's parts add to (the rest of the stats is read off their state). */
export type DispatcherCounters = Omit<
  OutboxDispatcherStats,
  'workerId' | 'running' | 'paused' | 'inFlight' | 'abandonedRunning'
>;

export function newCounters(): DispatcherCounters {
  return {
    claimed: 0,
    succeeded: 0,
    failed: 0,
    retried: 0,
    deadLettered: 0,
    leaseLost: 0,
    abandoned: 0,
    storeErrors: 0,
    wakeups: 0,
    wakeupClaims: 0,
    lastPollAt: null,
    lastStoreError: null,
  };
}
