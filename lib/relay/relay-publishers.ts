import type { ClientProxy } from '@nestjs/microservices';
import type { JetStreamClient, NatsConnection } from 'nats';
import { lastValueFrom } from 'rxjs';
import type { OutboxEvent } from '../interfaces/outbox-event.interface';
import { OutboxRelayOptionsError } from './outbox-relay-options.error';
import type {
  OutboxRelayCloudEventsOptions,
  RelayTransport,
} from './outbox-relay-options.interface';
import { relayHeaders, relayMessage } from './relay-message';
import { CLOUDEVENTS_JSON, cloudEventWire, WireMessage } from './relay-cloud-event';

/** What the relay hands a publisher for one event. */
export interface RelayPublication {
  pattern: string;
  event: OutboxEvent;
  timeoutMs: number;
}

/** Resolves once the broker confirmed the message; `duplicate` if it said it had it already. */
export type RelayPublisher = (publication: RelayPublication) => Promise<{ duplicate: boolean }>;

type Microservices = typeof import('@nestjs/microservices');

/**
 * Picks how a client's publish is confirmed (see docs/relay-and-scaling.md, "Relay to a broker"):
 * - RabbitMQ: Nest's `ClientRMQ` publishes on an amqp-connection-manager confirm channel, so
 *   `emit` settles on the broker's publisher confirm. The record is persistent and carries the
 *   event id as `messageId`; `timeout` drops it from the client's reconnect queue when unconfirmed.
 * - NATS: `ClientNats.emit` is a core publish, which nobody acknowledges; the relay publishes
 *   through JetStream on the client's connection instead and waits for the stream's PubAck, with
 *   the event id as `Nats-Msg-Id` (the stream drops re-publishes within its duplicate window).
 * - MQTT: `ClientMqtt.emit` settles on PUBACK (QoS 1) or PUBCOMP (QoS 2); QoS 0 is never used.
 * - Kafka: `ClientKafka.emit` awaits the producer's `send`, acknowledged per the producer's `acks`
 *   (kafkajs: all in-sync replicas by default); the event key is the message key (partition).
 * - Anything else: `emit`, trusting the client to settle only once the message is accepted.
 *
 * With `cloudEvents`, the body is no Nest packet but the CloudEvent (structured) or its data
 * (binary), so the relay publishes on the client's own channel or connection, with the same
 * confirmation: RabbitMQ, NATS and MQTT only.
 */
export function createPublisher(
  microservices: Microservices,
  client: ClientProxy,
  options: { mqttQos: 1 | 2; cloudEvents?: OutboxRelayCloudEventsOptions },
): { transport: RelayTransport; publish: RelayPublisher } {
  const emit = async (pattern: string, data: unknown) => {
    await lastValueFrom(client.emit(pattern, data), { defaultValue: undefined });
    return { duplicate: false };
  };
  const { cloudEvents } = options;
  const wire = cloudEvents ? cloudEventWire(cloudEvents) : undefined;
  if (client instanceof microservices.ClientRMQ) {
    if (wire) return { transport: 'rmq', publish: rmqChannelPublisher(client, wire('amqp')) };
    return {
      transport: 'rmq',
      publish: ({ pattern, event, timeoutMs }) =>
        emit(
          pattern,
          new microservices.RmqRecordBuilder(relayMessage(event))
            .setOptions({
              ...rmqProperties(event, 'application/json', timeoutMs),
              headers: relayHeaders(event),
            } as Parameters<InstanceType<Microservices['RmqRecordBuilder']>['setOptions']>[0])
            .build(),
        ),
    };
  }
  if (client instanceof microservices.ClientNats) {
    return { transport: 'nats', publish: jetStreamPublisher(client, wire?.('nats')) };
  }
  if (client instanceof microservices.ClientMqtt) {
    const v5 =
      (client as unknown as { options?: { protocolVersion?: number } }).options?.protocolVersion ===
      5;
    if (cloudEvents?.mode === 'binary' && !v5) {
      throw new OutboxRelayOptionsError(
        'cloudEvents.mode',
        "binary mode needs MQTT 5 user properties; the CloudEvents MQTT binding has no binary mode on MQTT 3.1.1. Set protocolVersion: 5 on the client or use mode: 'structured'",
      );
    }
    if (wire) {
      return {
        transport: 'mqtt',
        publish: mqttClientPublisher(client, wire('mqtt'), options.mqttQos, v5),
      };
    }
    return {
      transport: 'mqtt',
      publish: ({ pattern, event }) => {
        const builder = new microservices.MqttRecordBuilder(relayMessage(event)).setQoS(
          options.mqttQos,
        );
        // User properties exist from MQTT 5 on; on 3.1.1 the id travels in the body only.
        if (v5) builder.setProperties({ userProperties: relayHeaders(event) });
        return emit(pattern, builder.build());
      },
    };
  }
  if (cloudEvents) {
    throw new OutboxRelayOptionsError(
      'cloudEvents',
      `CloudEvents are sent through a RabbitMQ, NATS or MQTT client (the protocol bindings ` +
        `implemented here); ${client.constructor.name} gets the relay's envelope: remove cloudEvents`,
    );
  }
  if (client instanceof microservices.ClientKafka) {
    return {
      transport: 'kafka',
      publish: ({ pattern, event }) =>
        emit(pattern, {
          key: event.key ?? undefined,
          value: relayMessage(event),
          headers: relayHeaders(event),
        }),
    };
  }
  return {
    transport: 'other',
    publish: ({ pattern, event }) => emit(pattern, relayMessage(event)),
  };
}

function rmqProperties(event: OutboxEvent, contentType: string, timeoutMs: number) {
  return {
    messageId: event.id,
    type: event.type,
    timestamp: Math.floor(event.occurredAt.getTime() / 1000),
    contentType,
    persistent: true,
    // Read by amqp-connection-manager (not sent): an unconfirmed message leaves its queue.
    timeout: timeoutMs,
  };
}

/** The parts of Nest's `ClientRMQ` its own `dispatchEvent` publishes with. */
interface RmqClientInternals {
  channel: {
    publish(exchange: string, key: string, content: Buffer, options: object): Promise<unknown>;
    sendToQueue(queue: string, content: Buffer, options: object): Promise<unknown>;
  } | null;
  queue: string;
  options?: {
    exchange?: string;
    wildcards?: boolean;
    exchangeType?: string;
    headers?: Record<string, string>;
  };
}

/**
 * Publishes a raw body where `ClientRMQ.dispatchEvent` would publish its packet: on the client's
 * confirm channel, to the exchange (routing key = pattern) when the client routes through one,
 * else to its queue. The promise settles on the broker's publisher confirm.
 */
function rmqChannelPublisher(
  client: { connect(): Promise<unknown> },
  wire: (event: OutboxEvent) => WireMessage,
): RelayPublisher {
  return async ({ pattern, event, timeoutMs }) => {
    await client.connect();
    const rmq = client as unknown as RmqClientInternals;
    if (!rmq.channel) throw new Error('RabbitMQ client has no channel (not connected)');
    const message = wire(event);
    const content = Buffer.from(JSON.stringify(message.body ?? null));
    const properties = {
      ...rmqProperties(event, message.contentType, timeoutMs),
      headers: { ...rmq.options?.headers, ...message.headers },
    };
    const options = rmq.options ?? {};
    if (options.wildcards || options.exchangeType === 'fanout') {
      await rmq.channel.publish(options.exchange ?? rmq.queue, pattern, content, properties);
    } else {
      await rmq.channel.sendToQueue(rmq.queue, content, properties);
    }
    return { duplicate: false };
  };
}

/** Publishes on the client's mqtt.js connection; the callback fires on PUBACK / PUBCOMP. */
function mqttClientPublisher(
  client: { connect(): Promise<unknown>; unwrap<T>(): T },
  wire: (event: OutboxEvent) => WireMessage,
  qos: 1 | 2,
  v5: boolean,
): RelayPublisher {
  return async ({ pattern, event }) => {
    await client.connect();
    const mqtt = client.unwrap<{
      publish(topic: string, body: string, options: object, done: (error?: Error) => void): void;
    }>();
    const message = wire(event);
    // MQTT 3.1.1 has no properties: structured mode only, its content type implied.
    const properties = v5
      ? {
          contentType: message.contentType,
          ...(Object.keys(message.headers).length > 0 && { userProperties: message.headers }),
        }
      : undefined;
    await new Promise<void>((resolve, reject) =>
      mqtt.publish(
        pattern,
        JSON.stringify(message.body ?? null),
        { qos, ...(properties && { properties }) },
        (error) => (error ? reject(error) : resolve()),
      ),
    );
    return { duplicate: false };
  };
}

/**
 * Publishes through JetStream what Nest's `ServerNats` reads: its packet (`{ pattern, data }` as
 * JSON) with the envelope, or with `wire` the CloudEvent framed per the NATS binding.
 */
function jetStreamPublisher(
  client: {
    connect(): Promise<unknown>;
    unwrap<T>(): T;
  },
  wire?: (event: OutboxEvent) => WireMessage,
): RelayPublisher {
  // Loaded only here: NATS users have it installed, since Nest's ClientNats needs it too.
  const nats = require('nats') as typeof import('nats');
  let cached: { connection: NatsConnection; jetStream: JetStreamClient } | null = null;
  return async ({ pattern, event, timeoutMs }) => {
    await client.connect();
    const connection = client.unwrap<NatsConnection>();
    if (cached?.connection !== connection) {
      cached = { connection, jetStream: connection.jetstream() };
    }
    const natsHeaders = nats.headers();
    let body: unknown;
    if (wire) {
      const message = wire(event);
      body = message.body ?? null;
      // Structured mode says so in Content-Type; binary mode carries ce-datacontenttype instead.
      if (message.contentType === CLOUDEVENTS_JSON) {
        natsHeaders.set('Content-Type', message.contentType);
      }
      for (const [name, value] of Object.entries(message.headers)) natsHeaders.set(name, value);
    } else {
      body = { pattern, data: relayMessage(event) };
      for (const [name, value] of Object.entries(relayHeaders(event))) {
        natsHeaders.set(name, value);
      }
    }
    const ack = await cached.jetStream.publish(pattern, Buffer.from(JSON.stringify(body)), {
      msgID: event.id,
      headers: natsHeaders,
      timeout: timeoutMs,
    });
    return { duplicate: ack.duplicate };
  };
}
