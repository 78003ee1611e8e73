import type {
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
  storeError: (e: StoreErrorObservation) =>
    `Store ${e.operation} failed (${describe(e.error)}); retrying in ${e.retryInMs} ms`,
  listenerThrew: (kind: string, error: unknown) =>
    `A listener of outbox "${kind}" events threw: ${error instanceof Error ? error.message : String(error)}`,
  missingHealthIndicatorService: () =>
    'OutboxHealthIndicator needs HealthIndicatorService of @nestjs/terminus 11: import TerminusModule in your app',
};
