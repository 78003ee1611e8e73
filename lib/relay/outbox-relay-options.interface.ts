import type { InjectionToken } from '@nestjs/common';
import type { OutboxEvent } from '../interfaces/outbox-event.interface';
import type { BackoffOptions } from '../interfaces/outbox-module-options.interface';

/**
 * Client options as `ClientsModule.register` takes them: `@nestjs/microservices`' `ClientProvider`
 * (`{ transport: Transport.RMQ, options: { … } }`, or `{ customClass, options }`), described here
 * by shape so that these declarations compile without that optional package installed.
 */
export type OutboxRelayClientOptions =
  | { transport?: number; options?: object }
  | { customClass: abstract new (...args: never[]) => unknown; options?: object };

/** Which confirmation a relay waits for (see docs/relay-and-scaling.md, "Relay to a broker"). */
export type RelayTransport = 'rmq' | 'nats' | 'mqtt' | 'kafka' | 'other';

/** Options of `OutboxRelayModule.register()`: one relay is one outbox handler. */
export interface OutboxRelayOptions {
  /**
   * Stable handler name, stored with every delivery (retries, dead letters and replay go by it).
   * Renaming it strands open deliveries under the old name.
   */
  name: string;
  /**
   * The `@nestjs/microservices` client to publish with: the injection token of a `ClientProxy`
   * (e.g. the `name` given to `ClientsModule.register`), or client options
   * (`{ transport: Transport.RMQ, options: { … } }`), from which the relay creates and closes its
   * own client.
   */
  client: InjectionToken | OutboxRelayClientOptions;
  /** Event types this relay publishes (it claims only these). */
  types: string | string[];
  /** Return false to skip an event: its delivery is acknowledged without publishing. */
  filter?: (event: OutboxEvent) => boolean;
  /** Pattern (RabbitMQ/NATS/Redis pattern, MQTT/Kafka topic) per event. @default event.type */
  pattern?: (event: OutboxEvent) => string;
  /**
   * Bound on one publish including the broker's confirmation; a publish that is not confirmed in
   * time counts as a failed attempt (retried with backoff). Keep it below `timeoutMs`.
   * @default 10_000
   */
  publishTimeoutMs?: number;
  /** MQTT quality of service; 0 is refused (it has no acknowledgement). @default 1 */
  mqttQos?: 1 | 2;
  /**
   * Send each event as a CloudEvents 1.0 event instead of the relay's own envelope, per the
   * AMQP, NATS and MQTT protocol bindings (RabbitMQ, NATS and MQTT clients only; see
   * docs/relay-and-scaling.md, "CloudEvents"). @default the envelope ({@link OutboxRelayMessage})
   */
  cloudEvents?: OutboxRelayCloudEventsOptions;
  /** @default dispatcher.maxAttempts */
  maxAttempts?: number;
  /** Merged over dispatcher.backoff. */
  backoff?: BackoffOptions;
  /** Handler timeout. @default dispatcher.handlerTimeoutMs */
  timeoutMs?: number;
}

/** `OutboxRelayModule.register({ cloudEvents })`: how events go out as CloudEvents. */
export interface OutboxRelayCloudEventsOptions {
  /**
   * The CloudEvents `source` of every event: a URI-reference naming the producing context, e.g.
   * `'/orders-service'` or `'urn:example:orders'` (`source` + `id` identify an event). Required.
   */
  source: string;
  /**
   * `'structured'`: the body is the whole event as JSON (`application/cloudevents+json`).
   * `'binary'`: the body is the payload (`application/json`), the attributes are transport headers
   * (AMQP `cloudEvents_` application properties, NATS `ce-` headers, MQTT 5 user properties;
   * MQTT 3.1.1 has no binary mode). @default 'structured'
   */
  mode?: 'structured' | 'binary';
}

/**
 * What a CloudEvents relay sends: in structured mode the body, in binary mode the attributes
 * (as headers) around the payload. `id` is the event id, `subject` the event key.
 */
export interface OutboxCloudEvent<TData = unknown> {
  specversion: '1.0';
  id: string;
  source: string;
  type: string;
  /** RFC 3339: the event's `occurredAt`. */
  time: string;
  /** The event key; absent when the event has none. */
  subject?: string;
  datacontenttype: 'application/json';
  data: TData;
  /** W3C trace context (the CloudEvents distributed tracing extension), from the event's headers. */
  traceparent?: string;
  tracestate?: string;
}

/**
 * The body every relayed message carries (the `data` of Nest's packet). `id` is the event id at
 * the top level, where `@Inbox()` looks for a microservice message's id by default.
 */
export interface OutboxRelayMessage<TPayload = unknown> {
  id: string;
  type: string;
  key: string | null;
  /** ISO 8601. */
  occurredAt: string;
  payload: TPayload;
  /** The event's headers (trace context, tenant, correlation). */
  headers: Record<string, string>;
}

/** Counters of one relay since bootstrap. */
export interface OutboxRelayStats {
  /** Publishes the broker confirmed. */
  published: number;
  /** Confirmed publishes the broker reported as duplicates (NATS JetStream `Nats-Msg-Id`). */
  duplicates: number;
  /** Publishes that failed or timed out (each one is retried by the dispatcher). */
  failed: number;
  /** Events `filter` skipped. */
  skipped: number;
}
