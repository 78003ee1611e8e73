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
 * discarded and the delivery is redelivered later (README Guarantees 4).
 */
export interface LeaseLostObservation extends DeliveryObservation {
  kind: 'lease-lost';
  /** Where the loss was noticed: while keeping the lease, or when writing the outcome. */
  during: 'renewal' | 'outcome';
}

/** An `@Inbox()` consumer ran a message (`processed`), skipped a duplicate, or failed. */
export interface InboxObservation {
  kind: 'inbox-processed' | 'inbox-duplicate' | 'inbox-failed';
  consumer: string;
  messageId: string;
}

/** A store call failed; the dispatcher backs off and tries again (README Guarantees 12). */
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
  'inbox-processed',
  'inbox-duplicate',
  'inbox-failed',
  'store-error',
];
