import type { AbandonReason } from '../errors/abandoned-run.error';
import type { DeadLetterReason } from '../interfaces/outbox-store.interface';

/** What one delivery event says about the delivery (never the payload). */
export interface DeliveryObservation {
  eventId: string;
  /** The event's type. */
  type: string;
  deliveryId: string;
  handler: string;
  /** 1-based attempt number. */
  attempt: number;
  workerId: string;
}

/** An error as the stream reports it: name and message, no stack. */
export interface ObservedError {
  name: string;
  message: string;
}

/** `OutboxService.append()` stored an event (emitted once per event, after the store returned). */
export interface AppendedObservation {
  kind: 'appended';
  eventId: string;
  type: string;
  /** Deliveries written for this process's handlers (0: left for a worker that knows the type). */
  handlers: number;
}

/** The dispatcher claimed a delivery (its lease is now held by this worker). */
export interface ClaimedObservation extends DeliveryObservation {
  kind: 'claimed';
}

/** Outcomes of a handler run: the run's timing rides along. */
interface RunTiming {
  /** How long the handler ran, in milliseconds. */
  durationMs: number;
  /** When the handler started (epoch ms, this host's clock). */
  startedAt: number;
  /** When the event became due (store clock): its commit, or the time it was scheduled for. */
  availableAt: Date;
}

/** The handler returned and its acknowledgement was written. */
export interface DeliveredObservation extends DeliveryObservation, RunTiming {
  kind: 'delivered';
}

/** The handler failed and a retry was written. */
export interface RetryScheduledObservation extends DeliveryObservation, RunTiming {
  kind: 'retry-scheduled';
  delayMs: number;
  error: ObservedError;
}

/** The delivery was moved to the dead letters. */
export interface DeadLetteredObservation extends DeliveryObservation, Partial<RunTiming> {
  kind: 'dead-lettered';
  reason: DeadLetterReason;
  error: ObservedError;
}

/**
 * This worker lost a delivery's lease (renewal refused or an outcome fenced out): the outcome is
 * discarded and the delivery is redelivered later (docs/guarantees.md, Guarantees 4).
 */
export interface LeaseLostObservation extends DeliveryObservation {
  kind: 'lease-lost';
  /** Where the loss was noticed: while keeping the lease, or when writing the outcome. */
  during: 'renewal' | 'outcome';
}

/**
 * A run was given up while its handler still executed: its timeout passed (or its lease was lost,
 * or the app shut down), its `signal` was aborted, and the handler had not settled by the next
 * turn of the event loop. JavaScript cannot stop it: it keeps running, unwatched, until it settles
 * (`abandoned-settled`). Meanwhile this worker counts each new claim of the delivery as a failed
 * attempt instead of starting it beside the old run; another worker may run the next attempt
 * beside it (docs/handlers.md).
 */
export interface AbandonedObservation extends DeliveryObservation {
  kind: 'abandoned';
  /** What ended the run: its timeout, a lost lease, or the app shutting down. */
  reason: AbandonReason;
  /** The handler's timeout. */
  timeoutMs: number;
  /** When the handler started (epoch ms, this host's clock). */
  startedAt: number;
}

/** A handler reported `abandoned` settled at last (its result is ignored). */
export interface AbandonedSettledObservation extends DeliveryObservation {
  kind: 'abandoned-settled';
  /** How long the handler ran in all, from its start to its settlement. */
  durationMs: number;
  /** It threw or rejected (rather than returned). */
  failed: boolean;
}

/** An `@Inbox()` consumer ran a message (`processed`), skipped a duplicate, or failed. */
export interface InboxObservation {
  kind: 'inbox-processed' | 'inbox-duplicate' | 'inbox-failed';
  consumer: string;
  messageId: string;
}

/** A store call failed; the dispatcher backs off and tries again (docs/guarantees.md, Guarantees 12). */
export interface StoreErrorObservation {
  kind: 'store-error';
  /** `claim`, `ack`, `retry`, … */
  operation: string;
  error: ObservedError;
  /** The back-off before the dispatcher claims again. */
  retryInMs: number;
  workerId: string;
}

/** Every event of the stream; switch on `kind`. */
export type OutboxObservation =
  | AppendedObservation
  | ClaimedObservation
  | DeliveredObservation
  | RetryScheduledObservation
  | DeadLetteredObservation
  | LeaseLostObservation
  | AbandonedObservation
  | AbandonedSettledObservation
  | InboxObservation
  | StoreErrorObservation;

export type OutboxObservationKind = OutboxObservation['kind'];

/** Every kind, in a stable order. */
export const OUTBOX_OBSERVATION_KINDS: readonly OutboxObservationKind[] = [
  'appended',
  'claimed',
  'delivered',
  'retry-scheduled',
  'dead-lettered',
  'lease-lost',
  'abandoned',
  'abandoned-settled',
  'inbox-processed',
  'inbox-duplicate',
  'inbox-failed',
  'store-error',
];
