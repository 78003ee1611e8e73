import { DeliveryError, DeliveryRecord, EventRecord } from '../interfaces/outbox-store.interface';
import { UNEXPANDED_HANDLER } from '../outbox.constants';

/** A delivery's state as the admin API shows it (docs/admin.md, Deliveries). */
export type AdminDeliveryState =
  'pending' | 'scheduled' | 'retrying' | 'leased' | 'delivered' | 'dead';

export interface AdminErrorSummary {
  name: string;
  message: string;
  stack?: string;
}

/** One item of `GET deliveries`. */
export interface AdminDeliveryItem {
  id: string;
  eventId: string;
  type: string;
  key: string | null;
  handler: string;
  state: AdminDeliveryState;
  /** Attempts made so far (claims, including one running now). */
  attempt: number;
  /** Next attempt (retrying), due time (scheduled), or when it became due (leased). */
  availableAt: Date;
  leaseOwner: string | null;
  leaseUntil: Date | null;
  lastError: AdminErrorSummary | null;
}

/** One handler's part of an event (`GET events/:id`, `GET events`). */
export interface AdminEventDelivery {
  handler: string;
  state: AdminDeliveryState;
  /** `null` when nothing is stored for it any more (delivered) or it is not expanded yet. */
  deliveryId: string | null;
  attempt: number | null;
  availableAt: Date | null;
  leaseOwner: string | null;
  leaseUntil: Date | null;
  errors: DeliveryError[];
}

export interface AdminEventDetail {
  event: EventRecord['event'];
  deliveries: AdminEventDelivery[];
}

/** The state of a stored delivery at store time `now`. */
export function deliveryState(d: DeliveryRecord, now: Date): AdminDeliveryState {
  if (d.status === 'dead') return 'dead';
  if (d.status === 'leased') {
    // An expired lease (its worker stopped) is attempted again: it counts as retrying.
    return d.leaseUntil && d.leaseUntil > now ? 'leased' : 'retrying';
  }
  if (d.attempts > 0) return 'retrying';
  return d.availableAt > now ? 'scheduled' : 'pending';
}

export function lastErrorOf(errors: DeliveryError[]): AdminErrorSummary | null {
  const last = errors[errors.length - 1];
  if (!last) return null;
  return {
    name: last.name,
    message: last.message,
    ...(last.stack !== undefined ? { stack: last.stack } : {}),
  };
}

export function deliveryItem(d: DeliveryRecord, now: Date): AdminDeliveryItem {
  return {
    id: d.id,
    eventId: d.eventId,
    type: d.type,
    key: d.key,
    handler: d.handler,
    state: deliveryState(d, now),
    attempt: d.attempts,
    availableAt: d.availableAt,
    leaseOwner: d.leaseOwner,
    leaseUntil: d.leaseUntil,
    lastError: lastErrorOf(d.errors),
  };
}

/**
 * Every handler's part of an event: its stored deliveries (open and dead), and for each handler
 * this process's registry names for the type with nothing stored, `delivered` — or, while the
 * event is still unexpanded (`'*'`), the state of that unexpanded delivery. Handlers other
 * processes run and this one does not know, once delivered, are not listed.
 */
export function eventDeliveries(
  record: EventRecord,
  registryHandlers: string[],
  now: Date,
): AdminEventDelivery[] {
  const stored = record.deliveries.filter((d) => d.handler !== UNEXPANDED_HANDLER);
  const unexpanded = record.deliveries.find((d) => d.handler === UNEXPANDED_HANDLER);
  const out: AdminEventDelivery[] = stored.map((d) => ({
    handler: d.handler,
    state: deliveryState(d, now),
    deliveryId: d.id,
    attempt: d.attempts,
    availableAt: d.availableAt,
    leaseOwner: d.leaseOwner,
    leaseUntil: d.leaseUntil,
    errors: d.errors,
  }));
  const named = new Set(stored.map((d) => d.handler));
  const missing = registryHandlers.filter((h) => !named.has(h));
  for (const handler of missing) {
    out.push(
      unexpanded
        ? {
            handler,
            state: deliveryState(unexpanded, now),
            deliveryId: null,
            attempt: unexpanded.attempts,
            availableAt: unexpanded.availableAt,
            leaseOwner: null,
            leaseUntil: null,
            errors: [],
          }
        : {
            handler,
            state: 'delivered',
            deliveryId: null,
            attempt: null,
            availableAt: null,
            leaseOwner: null,
            leaseUntil: null,
            errors: [],
          },
    );
  }
  if (unexpanded && registryHandlers.length === 0) {
    // No handler known here: the unexpanded delivery itself, under '*'.
    out.push({
      handler: UNEXPANDED_HANDLER,
      state: deliveryState(unexpanded, now),
      deliveryId: unexpanded.id,
      attempt: unexpanded.attempts,
      availableAt: unexpanded.availableAt,
      leaseOwner: null,
      leaseUntil: null,
      errors: unexpanded.errors,
    });
  }
  return out.sort((a, b) => (a.handler < b.handler ? -1 : a.handler > b.handler ? 1 : 0));
}
