import { LeaseLostError } from '../errors/lease-lost.error';
import { NonRetryableError } from '../errors/non-retryable.error';
import { BackoffOptions } from '../interfaces/outbox-module-options.interface';
import { DeadLetterReason } from '../interfaces/outbox-store.interface';
import { backoffDelay } from './backoff';
import { isInstance } from './thrown-value';

/** What the dispatcher tells the store about one finished run. */
export type DeliveryOutcome =
  | { kind: 'ack' }
  | { kind: 'retry'; delayMs: number }
  | { kind: 'dead'; reason: DeadLetterReason }
  /** The lease was lost (or could not be kept): report nothing, another run will happen. */
  | { kind: 'lost' }
  /** Shut down under the handler: report nothing, the lease expires and it is redelivered. */
  | { kind: 'abandoned' };

export interface RunResult {
  failed: boolean;
  failure?: unknown;
  /** Why the run was interrupted (timeout, lease loss, shutdown), if it was. */
  interruptedBy?: unknown;
}

export interface OutcomePolicy {
  attempt: number;
  maxAttempts: number;
  backoff: Required<BackoffOptions>;
  retryIf?: (error: unknown, attempt: number) => boolean;
  isShutdown: (reason: unknown) => boolean;
}

/** The decision alone, without I/O: what happens to a delivery after one run. */
export function decideOutcome(run: RunResult, policy: OutcomePolicy): DeliveryOutcome {
  if (run.interruptedBy !== undefined && run.failure === run.interruptedBy) {
    if (run.interruptedBy instanceof LeaseLostError) return { kind: 'lost' };
    if (policy.isShutdown(run.interruptedBy)) return { kind: 'abandoned' };
  }
  if (!run.failed) return { kind: 'ack' };
  if (isInstance(run.failure, NonRetryableError) || refused(policy, run.failure)) {
    return { kind: 'dead', reason: 'rejected' };
  }
  if (policy.attempt >= policy.maxAttempts) return { kind: 'dead', reason: 'exhausted' };
  return { kind: 'retry', delayMs: backoffDelay(policy.attempt, policy.backoff) };
}

function refused(policy: OutcomePolicy, failure: unknown): boolean {
  if (!policy.retryIf) return false;
  try {
    return policy.retryIf(failure, policy.attempt) === false;
  } catch {
    return false;
  }
}
