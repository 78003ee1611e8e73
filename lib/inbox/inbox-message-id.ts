import type { ExecutionContext } from '@nestjs/common';
import { OUTBOX_CONTEXT_TYPE } from '../outbox.constants';
import type { OutboxEvent } from '../interfaces/outbox-event.interface';
import type { OutboxHandlerContext } from '../interfaces/outbox-handler.interface';
import { binaryCloudEventId } from './inbox-cloud-event-id';
import { IDEMPOTENCY_KEY_HEADER, INBOX_KEY_MAX_LENGTH } from './inbox.constants';
import { InboxOptions } from './inbox-options.interface';

/** Why no id could be used; the interceptor turns it into the transport's error. */
export class MissingMessageId {
  constructor(readonly reason: string) {}
}

/** Name of the consumer: explicit, else the outbox handler name, else `Class.method`. */
export function consumerName(context: ExecutionContext, options: InboxOptions): string {
  if (options.consumer !== undefined) return options.consumer;
  if (context.getType<string>() === OUTBOX_CONTEXT_TYPE) {
    const handler = (context.getArgByIndex(1) as OutboxHandlerContext | undefined)?.handler;
    if (handler) return handler;
  }
  return `${context.getClass().name}.${context.getHandler().name}`;
}

/** Accepts 1–255 printable characters without surrounding spaces, or a safe integer. */
export function normalizeKey(value: unknown, what: string): string | MissingMessageId {
  if (value === undefined || value === null || value === '') {
    return new MissingMessageId(`${what} is missing`);
  }
  const text = typeof value === 'number' && Number.isSafeInteger(value) ? String(value) : value;
  if (typeof text !== 'string') {
    return new MissingMessageId(`${what} must be a string, got ${typeof value}`);
  }
  if (text.length > INBOX_KEY_MAX_LENGTH) {
    return new MissingMessageId(`${what} is longer than ${INBOX_KEY_MAX_LENGTH} characters`);
  }
  // Trailing spaces compare equal under MySQL's PAD SPACE collations; control characters are
  // never part of a real id. Refusing both keeps one id meaning one row on every database.
  if (text !== text.trim() || hasControlCharacter(text)) {
    return new MissingMessageId(`${what} has surrounding spaces or control characters`);
  }
  // Drivers encode a lone UTF-16 surrogate as U+FFFD, so ids differing only there would share
  // one record and the second message would be dropped as a duplicate of the first.
  if (!isWellFormed(text)) {
    return new MissingMessageId(
      `${what} is not well-formed Unicode (it contains a lone UTF-16 surrogate)`,
    );
  }
  return text;
}

/** Finds the message id for this invocation, or says why there is none. */
export function resolveMessageId(
  context: ExecutionContext,
  options: InboxOptions,
): string | MissingMessageId {
  const type = context.getType<string>();
  if (type === OUTBOX_CONTEXT_TYPE && options.messageId === undefined) {
    const event = context.getArgByIndex(0) as OutboxEvent | undefined;
    return normalizeKey(event?.id, 'the event id');
  }
  if (type === 'rpc' && options.messageId === undefined) {
    // A binary-mode CloudEvent's id is a header: its payload is the event's data, whose own `id`
    // (an order id, say) is not the message's. Structured mode falls through to the body's `id`.
    const cloudEvent = binaryCloudEventId(context.switchToRpc().getContext());
    if (cloudEvent && 'fault' in cloudEvent) return new MissingMessageId(cloudEvent.fault);
    if (cloudEvent) return normalizeKey(cloudEvent.value, `the ${cloudEvent.what}`);
  }
  const source =
    options.messageId ??
    (type === 'http'
      ? { header: IDEMPOTENCY_KEY_HEADER }
      : type === 'rpc'
        ? { path: 'id' }
        : undefined);
  if (source === undefined) {
    return new MissingMessageId(
      `no default message id for context type "${type}"; pass @Inbox({ messageId: (context) => … })`,
    );
  }
  if (typeof source === 'function') {
    return normalizeKey(source(context), 'the message id returned by the messageId extractor');
  }
  if ('header' in source) {
    return normalizeKey(readHeader(context, source.header), `header "${source.header}"`);
  }
  const data =
    type === 'http'
      ? context.switchToHttp().getRequest()?.body
      : type === OUTBOX_CONTEXT_TYPE
        ? (context.getArgByIndex(0) as OutboxEvent | undefined)?.payload
        : context.switchToRpc().getData();
  return normalizeKey(readPath(data, source.path), `payload path "${source.path}"`);
}

function readPath(data: unknown, path: string): unknown {
  let value = data;
  for (const part of path.split('.')) {
    if (typeof value !== 'object' || value === null) return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

function headerValue(value: unknown): unknown {
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  return value;
}

/** Reads a header of an HTTP request or of the common microservice transports. */
function readHeader(context: ExecutionContext, name: string): unknown {
  const lower = name.toLowerCase();
  const type = context.getType<string>();
  if (type === 'http') {
    const headers = context.switchToHttp().getRequest()?.headers ?? {};
    return headers[lower];
  }
  if (type === OUTBOX_CONTEXT_TYPE) {
    const event = context.getArgByIndex(0) as OutboxEvent | undefined;
    return event?.headers?.[name] ?? event?.headers?.[lower];
  }
  const transport = context.switchToRpc().getContext() as Record<string, any> | undefined;
  if (!transport) return undefined;
  // NATS: getHeaders() returns MsgHdrs with get(); gRPC metadata also has get() (returns a list).
  const headers = typeof transport.getHeaders === 'function' ? transport.getHeaders() : undefined;
  if (headers && typeof headers.get === 'function') {
    // NATS header names are case-sensitive unless asked otherwise (2 = Match.IgnoreCase).
    const value =
      typeof headers.findKeys === 'function' ? headers.get(name, 2) : headers.get(lower);
    return Array.isArray(value) ? (value.length === 1 ? headerValue(value[0]) : value) : value;
  }
  if (headers && typeof headers === 'object') return headerValue(headers[name] ?? headers[lower]);
  const message = typeof transport.getMessage === 'function' ? transport.getMessage() : undefined;
  if (message && typeof message === 'object') {
    // RabbitMQ: AMQP message properties carry messageId and application headers.
    const properties = message.properties;
    if (properties && typeof properties === 'object') {
      if (lower === 'message-id' || lower === 'messageid') return properties.messageId;
      return headerValue(properties.headers?.[name] ?? properties.headers?.[lower]);
    }
    // Kafka (headers of Buffers) and MQTT v5 (user properties).
    const mapped = message.headers ?? message.properties?.userProperties;
    if (mapped && typeof mapped === 'object') return headerValue(mapped[name] ?? mapped[lower]);
  }
  const packet = typeof transport.getPacket === 'function' ? transport.getPacket() : undefined;
  const user = packet?.properties?.userProperties;
  if (user && typeof user === 'object') return headerValue(user[name] ?? user[lower]);
  return undefined;
}

function isWellFormed(text: string): boolean {
  // String.prototype.isWellFormed is Node 20+, newer than the ES2022 typings this package builds with.
  return (text as string & { isWellFormed(): boolean }).isWellFormed();
}

function hasControlCharacter(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x20 || code === 0x7f) return true;
  }
  return false;
}
