import type { ClientProvider, MicroserviceOptions } from '@nestjs/microservices';
import { Transport } from '@nestjs/microservices';

/**
 * The broker the sample relays to, from the environment; `null` (the default) keeps the sample on
 * SQLite alone. SAMPLE_BROKER=rabbitmq|nats, SAMPLE_BROKER_URL overrides the local default.
 */
export interface SampleBroker {
  kind: 'rabbitmq' | 'nats';
  /** The relay's client (the producer process). */
  client: ClientProvider;
  /** The consumer process's transport. */
  server: MicroserviceOptions;
}

export function sampleBroker(env: NodeJS.ProcessEnv = process.env): SampleBroker | null {
  const kind = env.SAMPLE_BROKER;
  if (kind === undefined || kind === '' || kind === 'none') return null;
  if (kind === 'rabbitmq') {
    const options = {
      urls: [env.SAMPLE_BROKER_URL ?? 'amqp://guest:guest@127.0.0.1:5672'],
      queue: env.SAMPLE_BROKER_QUEUE ?? 'sample-players',
    };
    return {
      kind,
      client: { transport: Transport.RMQ, options },
      // One message at a time, so the consumer applies a key's events in the order they arrive.
      server: { transport: Transport.RMQ, options: { ...options, prefetchCount: 1 } },
    };
  }
  if (kind === 'nats') {
    const options = {
      servers: [env.SAMPLE_BROKER_URL ?? 'nats://127.0.0.1:4222'],
      // Keep reconnecting through a broker outage (nats.js gives up after 10 attempts by default).
      maxReconnectAttempts: -1,
    };
    return {
      kind,
      client: { transport: Transport.NATS, options },
      server: { transport: Transport.NATS, options },
    };
  }
  throw new Error(`SAMPLE_BROKER must be rabbitmq, nats or unset, got "${kind}"`);
}

/** The JetStream stream the relay's NATS publishes are acknowledged by (created by the consumer). */
export const SAMPLE_NATS_STREAM = { name: 'sample-players', subjects: ['player.*'] };
