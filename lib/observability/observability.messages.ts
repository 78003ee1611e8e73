import type {
  AbandonedObservation,
  DeliveryObservation,
  ObservedError,
  StoreErrorObservation,
} from './outbox-events.interface';

const where = (d: DeliveryObservation) =>
  `event ${d.eventId} (type ${d.type}, attempt ${d.attempt}, worker ${d.workerId})`;
const describe = (error: ObservedError) => `${error.name}: ${error.message}`;

/** Log lines of the event stream: ids, names and error text, never payloads. */
export const ObservabilityMessages = {
  claimed: (d: DeliveryObservation) =>
    `Claimed delivery ${d.deliveryId} for ${d.handler}: ${where(d)}`,
  retryScheduled: (d: DeliveryObservation, error: ObservedError, delayMs: number) =>
    `Handler ${d.handler} failed on ${where(d)}: ${describe(error)}; retrying in ${delayMs} ms`,
  deadLettered: (d: DeliveryObservation, error: ObservedError, reason: string) =>
    `Handler ${d.handler} failed on ${where(d)}: ${describe(error)}; dead-lettered (${reason})`,
  leaseLost: (d: DeliveryObservation, during: string) =>
    `Lease lost for ${d.handler} on ${where(d)}, delivery ${d.deliveryId}, noticed at ${during}; ` +
    'outcome discarded, it will be redelivered',
  abandoned: (e: AbandonedObservation) =>
    `Handler ${e.handler} ${
      e.reason === 'timeout'
        ? `timed out after ${e.timeoutMs} ms`
        : e.reason === 'lease-lost'
          ? 'lost its lease'
          : 'was stopped by the shutdown'
    } on ${where(e)}, delivery ${e.deliveryId}, and ignores its abort signal: it keeps running ` +
    'unwatched; this worker fails further attempts of the delivery until it returns',
  abandonedSettled: (d: DeliveryObservation, durationMs: number, failed: boolean) =>
    `Abandoned handler ${d.handler} ${failed ? 'failed' : 'returned'} at last on ${where(d)}, ` +
    `delivery ${d.deliveryId}, after ${Math.round(durationMs)} ms; its result is ignored`,
  storeError: (e: StoreErrorObservation) =>
    `Store ${e.operation} failed (${describe(e.error)}); retrying in ${e.retryInMs} ms`,
  listenerThrew: (kind: string, error: unknown) =>
    `A listener of outbox "${kind}" events threw: ${error instanceof Error ? error.message : String(error)}`,
  missingHealthIndicatorService: () =>
    'OutboxHealthIndicator needs HealthIndicatorService of @nestjs/terminus 11: import TerminusModule in your app',
};
