import type { OutboxEvent } from '../interfaces/outbox-event.interface';
import type { OutboxRelayMessage } from './outbox-relay-options.interface';

/** W3C trace context and baggage: copied from the event's headers to the message's headers. */
export const TRACE_HEADERS = ['traceparent', 'tracestate', 'baggage'] as const;

/** Transport header names the relay sets on every message (where the transport has headers). */
export const RELAY_HEADERS = {
  messageId: 'message-id',
  type: 'event-type',
  key: 'event-key',
  occurredAt: 'occurred-at',
} as const;

export function relayMessage(event: OutboxEvent): OutboxRelayMessage {
  return {
    id: event.id,
    type: event.type,
    key: event.key,
    occurredAt: event.occurredAt.toISOString(),
    payload: event.payload,
    headers: { ...event.headers },
  };
}

/** The message's transport headers: id, type, key, time, and the event's trace context. */
export function relayHeaders(event: OutboxEvent): Record<string, string> {
  const headers: Record<string, string> = {
    [RELAY_HEADERS.messageId]: event.id,
    [RELAY_HEADERS.type]: event.type,
    [RELAY_HEADERS.occurredAt]: event.occurredAt.toISOString(),
  };
  if (event.key !== null) headers[RELAY_HEADERS.key] = event.key;
  const lower = new Map(Object.entries(event.headers).map(([k, v]) => [k.toLowerCase(), v]));
  for (const name of TRACE_HEADERS) {
    const value = lower.get(name);
    if (value !== undefined) headers[name] = value;
  }
  return headers;
}
