/**
 * For a Nest microservice that consumes CloudEvents (from `OutboxRelayModule` with `cloudEvents`,
 * or any producer following the AMQP, NATS or MQTT binding): set it as the server's
 * `deserializer`. Nest's default one reads the body as its own `{ pattern, data }` packet, and a
 * structured CloudEvent, which has `data` (and `id`) at the top, would be taken for one.
 *
 * The handler's `@Payload()` is the body as sent: the whole event in structured mode, its `data`
 * in binary mode. The pattern is the subject or topic on NATS and MQTT (as Nest routes them), and
 * the event's `type` on RabbitMQ, whose body carries no pattern. A Nest packet (a body with both
 * `pattern` and `data`, as Nest's clients send) is read as Nest's default deserializer reads it;
 * any other body is the payload (NATS and MQTT hand a deserializer no headers, so a binary
 * event's data cannot be told apart from other bodies there).
 */
export class CloudEventsDeserializer {
  deserialize(value: unknown, options?: Record<string, any>): { pattern?: unknown; data: unknown } {
    const body = parse(value);
    const type = cloudEventType(body, options);
    if (type === undefined && isNestPacket(body))
      return body as { pattern?: unknown; data: unknown };
    // NATS and MQTT pass the subscription as `channel`; RabbitMQ passes the message properties.
    return { pattern: options?.channel ?? type, data: body };
  }
}

/** NATS hands over bytes; RabbitMQ and MQTT have already tried JSON.parse. */
function parse(value: unknown): unknown {
  if (!(value instanceof Uint8Array)) return value;
  const text = Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('utf8');
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** The `type` of a structured event (body) or of a binary one on AMQP (application properties). */
function cloudEventType(body: unknown, options?: Record<string, any>): string | undefined {
  if (isObject(body) && typeof body.specversion === 'string' && typeof body.type === 'string') {
    return body.type;
  }
  const headers = options?.headers;
  if (!isObject(headers)) return undefined;
  for (const separator of ['_', ':']) {
    const type = headers[`cloudEvents${separator}type`];
    if (headers[`cloudEvents${separator}specversion`] !== undefined && type !== undefined) {
      return Buffer.isBuffer(type) ? type.toString('utf8') : String(type);
    }
  }
  return undefined;
}

function isNestPacket(body: unknown): boolean {
  return isObject(body) && body.pattern !== undefined && body.data !== undefined;
}

function isObject(value: unknown): value is Record<string, any> {
  return typeof value === 'object' && value !== null;
}
