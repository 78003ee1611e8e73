import { BackoffOptions } from '../interfaces/outbox-module-options.interface';

/** Delay before the next attempt after `attempt` failed: exponential, capped, with ± jitter. */
export function backoffDelay(
  attempt: number,
  backoff: Required<BackoffOptions>,
  random: () => number = Math.random,
): number {
  const base = Math.min(
    backoff.maxMs,
    backoff.initialMs * Math.pow(backoff.factor, Math.max(0, attempt - 1)),
  );
  const spread = base * backoff.jitter * (2 * random() - 1);
  const delay = Math.max(0, Math.min(backoff.maxMs, Math.round(base + spread)));
  // Options are validated at bootstrap; this only keeps a bad value from reaching a store.
  return Number.isFinite(delay) ? delay : 0;
}
