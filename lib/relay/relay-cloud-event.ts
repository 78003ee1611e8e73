import type { OutboxEvent } from '../interfaces/outbox-event.interface';
import type {
  OutboxCloudEvent,
  OutboxRelayCloudEventsOptions,
} from './outbox-relay-options.interface';

/** Media type of a structured-mode event (the JSON event format). */
export const CLOUDEVENTS_JSON = 'application/cloudevents+json; charset=utf-8';

/** The distributed tracing extension's attributes, read from the event's headers. */
const TRACE_ATTRIBUTES = ['traceparent', 'tracestate'] as const;

/** The outbox event as a CloudEvent: `id` = event id, `time` = occurredAt, `subject` = key. */
export function toCloudEvent(event: OutboxEvent, source: string): OutboxCloudEvent {
  const cloudEvent: OutboxCloudEvent = {
    specversion: '1.0',
    id: event.id,
    source,
    type: event.type,
    time: event.occurredAt.toISOString(),
    datacontenttype: 'application/json',
    data: event.payload,
  };
  if (event.key !== null) cloudEvent.subject = event.key;
  const lower = new Map(Object.entries(event.headers).map(([k, v]) => [k.toLowerCase(), v]));
  for (const name of TRACE_ATTRIBUTES) {
    const value = lower.get(name);
    if (value !== undefined) cloudEvent[name] = value;
  }
  return cloudEvent;
}

/** Context attributes (all but `data`) in their canonical string form, for binary mode. */
export function contextAttributes(cloudEvent: OutboxCloudEvent): Record<string, string> {
  const attributes: Record<string, string> = {};
  for (const [name, value] of Object.entries(cloudEvent)) {
    if (name !== 'data' && value !== undefined) attributes[name] = String(value);
  }
  return attributes;
}

/** One message as it goes on the wire, before the transport frames it. */
export interface WireMessage {
  body: unknown;
  contentType: string;
  /** Transport headers (names as the transport's binding wants them). */
  headers: Record<string, string>;
}

export type Binding = 'amqp' | 'nats' | 'mqtt';

/**
 * The CloudEvent of an event as one binding frames it. Structured: the JSON event format as
 * the body. Binary: the data as the body, `datacontenttype` as the content type, the other
 * attributes as headers named per binding: AMQP application properties `cloudEvents_…` (the
 * binding allows `_` or `:` and prefers `_` for JMS clients), NATS `ce-…` (every attribute,
 * percent-encoded values), MQTT 5 user properties under the attribute names.
 */
export function cloudEventWire(options: OutboxRelayCloudEventsOptions) {
  return (binding: Binding) =>
    (event: OutboxEvent): WireMessage => {
      const cloudEvent = toCloudEvent(event, options.source);
      if (options.mode !== 'binary') {
        return { body: cloudEvent, contentType: CLOUDEVENTS_JSON, headers: {} };
      }
      const attributes = contextAttributes(cloudEvent);
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(attributes)) {
        if (binding === 'nats') headers[`ce-${name}`] = natsHeaderValue(value);
        else if (name !== 'datacontenttype') {
          headers[binding === 'amqp' ? `cloudEvents_${name}` : name] = value;
        }
      }
      return { body: cloudEvent.data, contentType: cloudEvent.datacontenttype, headers };
    };
}

/**
 * A NATS header value per the NATS binding: space, double quote, percent and everything outside
 * printable ASCII percent-encoded from UTF-8, upper-case hex.
 */
export function natsHeaderValue(value: string): string {
  let encoded = '';
  for (const character of value) {
    const code = character.codePointAt(0)!;
    if (code > 0x20 && code < 0x7f && code !== 0x22 && code !== 0x25) {
      encoded += character;
    } else {
      for (const byte of Buffer.from(character, 'utf8')) {
        encoded += `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
      }
    }
  }
  return encoded;
}

/**
 * A URI-reference (RFC 3986) as far as characters go: no spaces or other characters a URI never
 * holds, and `%` only before two hex digits. Enough to refuse a name like "orders service".
 */
export function uriReferenceFault(value: string): string | undefined {
  if (!/^[A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;=%]+$/.test(value)) {
    return 'contains characters a URI-reference cannot hold (spaces, quotes, non-ASCII, …); percent-encode them';
  }
  if (/%(?![0-9A-Fa-f]{2})/.test(value)) {
    return 'has a "%" that does not start a percent-encoded octet';
  }
  return undefined;
}
