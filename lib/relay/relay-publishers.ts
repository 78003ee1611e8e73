import type { ClientProxy } from '@nestjs/microservices';
import type { JetStreamClient, NatsConnection } from 'nats';
import { lastValueFrom } from 'rxjs';
import type { OutboxEvent } from '../interfaces/outbox-event.interface';
import type { OutboxRelayMessage, RelayTransport } from './outbox-relay-options.interface';

/** What the relay hands a publisher for one event. */
export interface RelayPublication {
  pattern: string;
  message: OutboxRelayMessage;
  headers: Record<string, string>;
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
 */
export function createPublisher(
  microservices: Microservices,
  client: ClientProxy,
  options: { mqttQos: 1 | 2 },
): { transport: RelayTransport; publish: RelayPublisher } {
  const emit = async (pattern: string, data: unknown) => {
    await lastValueFrom(client.emit(pattern, data), { defaultValue: undefined });
    return { duplicate: false };
  };
  if (client instanceof microservices.ClientRMQ) {
    return {
      transport: 'rmq',
      publish: ({ pattern, message, headers, event, timeoutMs }) =>
        emit(
          pattern,
          new microservices.RmqRecordBuilder(message)
            .setOptions({
              messageId: event.id,
              type: event.type,
              timestamp: Math.floor(event.occurredAt.getTime() / 1000),
              contentType: 'application/json',
              persistent: true,
              headers,
              // Read by amqp-connection-manager (not sent): an unconfirmed message leaves its queue.
              timeout: timeoutMs,
            } as Parameters<InstanceType<Microservices['RmqRecordBuilder']>['setOptions']>[0])
            .build(),
        ),
    };
  }
  if (client instanceof microservices.ClientNats) {
    return { transport: 'nats', publish: jetStreamPublisher(client) };
  }
  if (client instanceof microservices.ClientMqtt) {
    const v5 = (client as unknown as { options?: { protocolVersion?: number } }).options
      ?.protocolVersion;
    return {
      transport: 'mqtt',
      publish: ({ pattern, message, headers }) => {
        const builder = new microservices.MqttRecordBuilder(message).setQoS(options.mqttQos);
        // User properties exist from MQTT 5 on; on 3.1.1 the id travels in the body only.
        if (v5 === 5) builder.setProperties({ userProperties: headers });
        return emit(pattern, builder.build());
      },
    };
  }
  if (client instanceof microservices.ClientKafka) {
    return {
      transport: 'kafka',
      publish: ({ pattern, message, headers, event }) =>
        emit(pattern, { key: event.key ?? undefined, value: message, headers }),
    };
  }
  return { transport: 'other', publish: ({ pattern, message }) => emit(pattern, message) };
}

/** Publishes the packet Nest's `ServerNats` reads (`{ pattern, data }` as JSON) through JetStream. */
function jetStreamPublisher(client: {
  connect(): Promise<unknown>;
  unwrap<T>(): T;
}): RelayPublisher {
  // Loaded only here: NATS users have it installed, since Nest's ClientNats needs it too.
  const nats = require('nats') as typeof import('nats');
  let cached: { connection: NatsConnection; jetStream: JetStreamClient } | null = null;
  return async ({ pattern, message, headers, event, timeoutMs }) => {
    await client.connect();
    const connection = client.unwrap<NatsConnection>();
    if (cached?.connection !== connection) {
      cached = { connection, jetStream: connection.jetstream() };
    }
    const natsHeaders = nats.headers();
    for (const [name, value] of Object.entries(headers)) natsHeaders.set(name, value);
    const ack = await cached.jetStream.publish(
      pattern,
      Buffer.from(JSON.stringify({ pattern, data: message })),
      { msgID: event.id, headers: natsHeaders, timeout: timeoutMs },
    );
    return { duplicate: ack.duplicate };
  };
}
