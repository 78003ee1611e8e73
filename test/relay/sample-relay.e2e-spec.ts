import { INestApplication, INestMicroservice } from '@nestjs/common';
import type { MicroserviceOptions } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { getDataSourceToken } from '@nestjs/typeorm';
import * as amqp from 'amqplib';
import { randomBytes } from 'node:crypto';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { describeWithService, SERVICES } from '../support/services';

const QUEUE = `sample-players-${randomBytes(3).toString('hex')}`;
const URL = `amqp://guest:guest@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;
const saved = { ...process.env };
Object.assign(process.env, {
  SAMPLE_DB: ':memory:',
  SAMPLE_CONSUMER_DB: ':memory:',
  SAMPLE_BROKER: 'rabbitmq',
  SAMPLE_BROKER_URL: URL,
  SAMPLE_BROKER_QUEUE: QUEUE,
});
const { AppModule } =
  require('../../sample-app/app.module') as typeof import('../../sample-app/app.module');
const { CONSUMER_CONNECTION, ConsumerModule } =
  require('../../sample-app/consumer/consumer.module') as typeof import('../../sample-app/consumer/consumer.module');
const { sampleBroker } =
  require('../../sample-app/relay/broker.config') as typeof import('../../sample-app/relay/broker.config');
const { SampleRelayModule } =
  require('../../sample-app/relay/sample-relay.module') as typeof import('../../sample-app/relay/sample-relay.module');

afterAll(() => {
  process.env = saved;
});

it('the sample relays nothing unless SAMPLE_BROKER is set', () => {
  expect(sampleBroker({})).toBeNull();
  expect(SampleRelayModule.fromEnv({}).imports).toBeUndefined();
  expect(() => sampleBroker({ SAMPLE_BROKER: 'kafka' })).toThrow(/rabbitmq, nats or unset/);
});

describeWithService('rabbitmq', 'sample app with SAMPLE_BROKER=rabbitmq', () => {
  let app: INestApplication;
  let consumer: INestMicroservice;

  beforeAll(async () => {
    const consumerRef = await Test.createTestingModule({ imports: [ConsumerModule] }).compile();
    consumer = consumerRef.createNestMicroservice<MicroserviceOptions>(sampleBroker()!.server);
    consumer.useLogger(false);
    await consumer.listen();
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
  });

  afterAll(async () => {
    await app?.close();
    await consumer?.close();
    const connection = await amqp.connect(URL);
    const channel = await connection.createChannel();
    await channel.deleteQueue(QUEUE).catch(() => undefined);
    await connection.close();
  });

  it('player.created and player.scored reach the consumer app over RabbitMQ and are applied to its own database', async () => {
    const http = request(app.getHttpServer());
    const player = (await http.post('/players').send({ name: 'lin' }).expect(201)).body;
    for (let i = 0; i < 2; i++) {
      await http
        .post(`/players/${player.id}/points`)
        .set('Idempotency-Key', '0d6f3f57-8d0e-4a8c-9b7e-1c2d3e4f5a6b')
        .send({ points: 7 })
        .expect(201);
    }
    const cards = consumer
      .get<DataSource>(getDataSourceToken(CONSUMER_CONNECTION))
      .getRepository('PlayerCard');
    const deadline = Date.now() + 15_000;
    let card: { name: string; score: number } | null = null;
    while (Date.now() < deadline) {
      card = (await cards.findOneBy({ playerId: player.id })) as {
        name: string;
        score: number;
      } | null;
      if (card?.score === 7) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(card).toMatchObject({ name: 'lin', score: 7 });
  }, 30_000);
});
