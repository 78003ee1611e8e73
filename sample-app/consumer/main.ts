import 'reflect-metadata';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { NestFactory } from '@nestjs/core';
import type { MicroserviceOptions } from '@nestjs/microservices';
import { sampleBroker, SAMPLE_NATS_STREAM } from '../relay/broker.config';
import { CONSUMER_DATABASE, ConsumerModule } from './consumer.module';

/** `SAMPLE_BROKER=rabbitmq npm run start:consumer`: applies relayed player events once each. */
async function bootstrap(): Promise<void> {
  const broker = sampleBroker();
  if (!broker) throw new Error('set SAMPLE_BROKER=rabbitmq or nats (and the same for npm start)');
  if (CONSUMER_DATABASE !== ':memory:') mkdirSync(dirname(CONSUMER_DATABASE), { recursive: true });
  if (broker.kind === 'nats') {
    // The relay's publishes are acknowledged by a JetStream stream that captures the subjects.
    const { connect } = await import('nats');
    const nc = await connect({ servers: process.env.SAMPLE_BROKER_URL ?? 'nats://127.0.0.1:4222' });
    const jsm = await nc.jetstreamManager();
    await jsm.streams
      .info(SAMPLE_NATS_STREAM.name)
      .catch(() => jsm.streams.add(SAMPLE_NATS_STREAM));
    await nc.close();
  }
  const app = await NestFactory.createMicroservice<MicroserviceOptions>(
    ConsumerModule,
    broker.server,
  );
  app.enableShutdownHooks();
  await app.listen();
  console.log(`Consumer listening on ${broker.kind}; cards in ${CONSUMER_DATABASE}`);
}

void bootstrap();
