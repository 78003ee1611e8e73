/**
 * The `id` of a CloudEvent sent in binary content mode, where the attributes travel as transport
 * headers under each protocol binding's prefix (docs/inbox.md, "CloudEvents"). A structured-mode
 * event needs nothing here: it is the payload, and its `id` is where `@Inbox()` looks by default.
 */

/** Where a binary CloudEvent's attributes are, per transport, and how its `id` reads. */
interface AttributeSource {
  /** The attribute as the transport carries it, or undefined. */
  get(attribute: 'specversion' | 'id'): unknown;
  /** How the header of `attribute` is named, for error messages. */
  name(attribute: string): string;
  /** Undoes the transport's value encoding (NATS percent-encodes). */
  decode?(value: string): string;
}

/** A binary CloudEvent's id, or why it has none; `undefined` when the message is no CloudEvent. */
export function binaryCloudEventId(
  transport: Record<string, any> | undefined,
): { value: unknown; what: string } | { fault: string } | undefined {
  const source = transport ? attributeSource(transport) : undefined;
  if (!source || first(source.get('specversion')) === undefined) return undefined;
  const what = `CloudEvent attribute "id" (${source.name('id')})`;
  const raw = text(first(source.get('id')));
  if (typeof raw !== 'string' || source.decode === undefined) return { value: raw, what };
  try {
    return { value: source.decode(raw), what };
  } catch {
    return { fault: `${what} has invalid percent-encoding` };
  }
}

function attributeSource(transport: Record<string, any>): AttributeSource | undefined {
  // NATS (binding: `ce-` headers, case-insensitive names, percent-encoded values).
  const headers = typeof transport.getHeaders === 'function' ? transport.getHeaders() : undefined;
  if (headers && typeof headers.get === 'function' && typeof headers.findKeys === 'function') {
    return {
      // 2 = Match.IgnoreCase in nats.js; an absent header reads as ''.
      get: (attribute) => headers.get(`ce-${attribute}`, 2) || undefined,
      name: (attribute) => `header ce-${attribute}`,
      decode: natsHeaderValue,
    };
  }
  const message = typeof transport.getMessage === 'function' ? transport.getMessage() : undefined;
  // AMQP (binding: application properties `cloudEvents_` or `cloudEvents:`; RabbitMQ headers).
  const amqp = message?.properties?.headers;
  if (amqp && typeof amqp === 'object') {
    const separator = 'cloudEvents_specversion' in amqp ? '_' : ':';
    return {
      get: (attribute) => amqp[`cloudEvents${separator}${attribute}`],
      name: (attribute) => `application property cloudEvents${separator}${attribute}`,
    };
  }
  // Kafka (binding: `ce_` headers).
  const kafka = message && typeof message === 'object' ? message.headers : undefined;
  if (kafka && typeof kafka === 'object') {
    return {
      get: (attribute) => kafka[`ce_${attribute}`],
      name: (attribute) => `header ce_${attribute}`,
    };
  }
  // MQTT 5 (binding: user properties named as the attributes, no prefix).
  const packet = typeof transport.getPacket === 'function' ? transport.getPacket() : undefined;
  const user = packet?.properties?.userProperties;
  if (user && typeof user === 'object') {
    return {
      get: (attribute) => user[attribute],
      name: (attribute) => `user property ${attribute}`,
    };
  }
  return undefined;
}

function first(value: unknown): unknown {
  return Array.isArray(value) ? value[0] : value;
}

function text(value: unknown): unknown {
  return Buffer.isBuffer(value) ? value.toString('utf8') : value;
}

/**
 * The NATS binding's header value decoding: unquote a double-quoted value (older senders), then one
 * round of percent-decoding; sequences that are not valid UTF-8 throw (`decodeURIComponent` refuses
 * overlong forms such as `%C0%A0`).
 */
function natsHeaderValue(value: string): string {
  const unquoted =
    value.length >= 2 && value.startsWith('"') && value.endsWith('"')
      ? value.slice(1, -1).replace(/\\(.)/g, '$1')
      : value;
  return decodeURIComponent(unquoted);
}
