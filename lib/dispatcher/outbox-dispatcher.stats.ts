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
  storeErrors: number;
  lastPollAt: Date | null;
  lastStoreError: string | null;
}
