/**
 * One kit per broker for the relay tests: the relay's client options (through the test's TCP
 * proxy), the consumer's microservice options (straight to the broker), and what the consumer
 * can read of the transport's message id and trace headers. No Jest globals: the crash fixture
 * imports it too.
 */
import type { ClientProvider, MicroserviceOptions } from '@nestjs/microservices';
import { Transport } from '@nestjs/microservices';
import { SERVICES } from '../support/services';

export type KitName = 'rabbitmq' | 'nats' | 'mqtt';

export interface RelayKit {
  name: KitName;
  target: { host: string; port: number };
  /** The relay's client, connecting to `port` (the proxy). */
  client(port: number, run: string): ClientProvider;
  /** The consumer's transport, straight to the broker. */
  server(run: string): MicroserviceOptions;
  /** Event type used by the tests of this kit. */
  type(run: string): string;
  /** The relay's `pattern` option, when the pattern is not the event type. */
  pattern?: (event: { type: string }) => string;
  /** What the consumer sees of the transport: native message id and the traceparent header. */
  inspect(context: unknown): { messageId?: string; traceparent?: string };
}

export const KITS: Record<KitName, RelayKit> = {
  rabbitmq: {
    name: 'rabbitmq',
    target: SERVICES.rabbitmq,
    client: (port, run) => ({
      transport: Transport.RMQ,
      options: {
        urls: [`amqp://guest:guest@127.0.0.1:${port}`],
        queue: `relay-${run}`,
        socketOptions: { reconnectTimeInSeconds: 0.3, heartbeatIntervalInSeconds: 1 },
      },
    }),
    server: (run) => ({
      transport: Transport.RMQ,
      options: {
        urls: [`amqp://guest:guest@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`],
        queue: `relay-${run}`,
        prefetchCount: 1,
      },
    }),
    type: (run) => `relay-${run}.order.placed`,
    inspect(context) {
      const message = (
        context as { getMessage(): { properties: Record<string, any> } }
      ).getMessage();
      return {
        messageId: message.properties.messageId,
        traceparent: message.properties.headers?.traceparent,
      };
    },
  },
  nats: {
    name: 'nats',
    target: SERVICES.nats,
    client: (port) => ({
      transport: Transport.NATS,
      options: {
        servers: [`nats://127.0.0.1:${port}`],
        maxReconnectAttempts: -1,
        reconnectTimeWait: 200,
      },
    }),
    server: () => ({
      transport: Transport.NATS,
      options: { servers: [`nats://${SERVICES.nats.host}:${SERVICES.nats.port}`] },
    }),
    type: (run) => `relay-${run}.order.placed`,
    inspect(context) {
      const headers = (
        context as { getHeaders(): { get(name: string): string } | undefined }
      ).getHeaders();
      return {
        messageId: headers?.get('Nats-Msg-Id') || undefined,
        traceparent: headers?.get('traceparent') || undefined,
      };
    },
  },
  mqtt: {
    name: 'mqtt',
    target: SERVICES.mqtt,
    client: (port) => ({
      transport: Transport.MQTT,
      options: { url: `mqtt://127.0.0.1:${port}`, protocolVersion: 5, reconnectPeriod: 200 },
    }),
    server: () => ({
      transport: Transport.MQTT,
      options: {
        url: `mqtt://${SERVICES.mqtt.host}:${SERVICES.mqtt.port}`,
        protocolVersion: 5,
        subscribeOptions: { qos: 1 },
      },
    }),
    type: (run) => `relay-${run}.order.placed`,
    // MQTT levels are separated by slashes.
    pattern: (event) => event.type.replaceAll('.', '/'),
    inspect(context) {
      const packet = (
        context as { getPacket(): { properties?: { userProperties?: Record<string, string> } } }
      ).getPacket();
      return {
        messageId: packet.properties?.userProperties?.['message-id'],
        traceparent: packet.properties?.userProperties?.traceparent,
      };
    },
  },
};
