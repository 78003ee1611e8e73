import { Controller, INestApplication, Inject, Logger, Module } from '@nestjs/common';
import { Ctx, EventPattern, Payload, RmqContext, Transport } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import * as amqp from 'amqplib';
import { randomBytes } from 'node:crypto';
import { DataSource, EntityManager } from 'typeorm';
import { Inbox, InboxManager, InboxModule } from 'nestjs-outbox';
import { describeWithService, SERVICES } from '../support/services';
import {
  createEffectTable,
  inboxTable,
  openInboxDataSource,
  uniquePrefix,
} from './inbox-test-helpers';

const RUN = randomBytes(3).toString('hex');
const URL = `amqp://guest:guest@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;
const MANUAL_QUEUE = `inbox-rmq-manual-${RUN}`;
const AUTO_QUEUE = `inbox-rmq-auto-${RUN}`;
const DEAD_LETTERS = `inbox-rmq-dead-${RUN}`;
const SHIPPED = 'order.shipped';
const EFFECTS = Symbol('EFFECTS');

/** One consumer per ack mode, both writing one effect row per applied message. */
@Controller()
class ShipmentsConsumer {
  constructor(@Inject(EFFECTS) private readonly effects: { insertSql: string }) {}

  @EventPattern(SHIPPED)
  @Inbox({ consumer: 'shipments', noAck: false })
  async onShipped(
    @Payload() order: { id: string },
    @InboxManager() manager: EntityManager,
    @Ctx() context: RmqContext,
  ): Promise<void> {
    await manager.query(this.effects.insertSql, [order.id, 'shipped']);
    context.getChannelRef().ack(context.getMessage());
  }
}

@Controller()
class AutoAckConsumer {
  constructor(@Inject(EFFECTS) private readonly effects: { insertSql: string }) {}

  @EventPattern(SHIPPED)
  @Inbox({ consumer: 'shipments-auto' })
  async onShipped(@Payload() order: { id: string }, @InboxManager() manager: EntityManager) {
    await manager.query(this.effects.insertSql, [order.id, 'auto']);
  }
}

async function until(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describeWithService('rabbitmq', '@Inbox() on RabbitMQ @EventPattern consumers', () => {
  let dataSource: DataSource;
  let effects: Awaited<ReturnType<typeof createEffectTable>>;
  const prefix = uniquePrefix('rmq');
  let connection: amqp.ChannelModel;
  let channel: amqp.Channel;
  let errors: jest.SpyInstance;

  async function startApp(
    controller: new (...args: never[]) => unknown,
    queue: string,
    noAck: boolean,
  ): Promise<INestApplication> {
    @Module({
      imports: [InboxModule.forRoot({ dataSource, tablePrefix: prefix, cleanupIntervalMs: 0 })],
      controllers: [controller],
      providers: [{ provide: EFFECTS, useValue: effects }],
    })
    class RabbitConsumerApp {}
    const moduleRef = await Test.createTestingModule({ imports: [RabbitConsumerApp] }).compile();
    const app = moduleRef.createNestApplication({ logger: ['error'] });
    app.connectMicroservice({
      transport: Transport.RMQ,
      options: {
        urls: [URL],
        queue,
        noAck,
        queueOptions: {
          durable: false,
          autoDelete: false,
          deadLetterExchange: '',
          deadLetterRoutingKey: DEAD_LETTERS,
        },
      },
    });
    await app.startAllMicroservices();
    await app.init();
    return app;
  }

  const publish = (queue: string, data: object) =>
    channel.sendToQueue(queue, Buffer.from(JSON.stringify({ pattern: SHIPPED, data })));

  const deadLetters = async () => (await channel.checkQueue(DEAD_LETTERS)).messageCount;

  beforeAll(async () => {
    dataSource = await openInboxDataSource('postgres');
    effects = await createEffectTable(dataSource, `${prefix}effects`);
    connection = await amqp.connect(URL);
    channel = await connection.createChannel();
    await channel.assertQueue(DEAD_LETTERS, { durable: false });
  });

  beforeEach(() => {
    errors = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
  });
  afterEach(() => errors.mockRestore());

  afterAll(async () => {
    for (const queue of [MANUAL_QUEUE, AUTO_QUEUE, DEAD_LETTERS])
      await channel?.deleteQueue(queue).catch(() => undefined);
    await connection?.close().catch(() => undefined);
    await effects?.drop();
    await inboxTable(dataSource, prefix).drop();
    await dataSource?.destroy();
  });

  it('manual ack (noAck: false): a message without an id is rejected to the dead-letter queue and logged; a duplicate is acked', async () => {
    const app = await startApp(ShipmentsConsumer, MANUAL_QUEUE, false);
    try {
      publish(MANUAL_QUEUE, { note: 'no id here' });
      await until(async () => (await deadLetters()) === 1);
      const dead = await channel.get(DEAD_LETTERS, { noAck: true });
      expect(dead && JSON.parse(dead.content.toString()).data).toEqual({ note: 'no id here' });
      expect(errors.mock.calls.map((c) => String(c[0]))).toContainEqual(
        expect.stringMatching(
          /shipments refused a message: payload path "id" is missing; rejected/,
        ),
      );

      publish(MANUAL_QUEUE, { id: `o-${RUN}` });
      publish(MANUAL_QUEUE, { id: `o-${RUN}` });
      await until(async () => (await effects.count(`o-${RUN}`)) === 1);
      await until(
        async () => (await inboxTable(dataSource, prefix).count('shipments', `o-${RUN}`)) === 1,
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
    } finally {
      await app.close();
    }
    // Unacknowledged messages would return to the queue when the consumer's channel closed.
    await until(async () => (await channel.checkQueue(MANUAL_QUEUE)).consumerCount === 0);
    expect((await channel.checkQueue(MANUAL_QUEUE)).messageCount).toBe(0);
    expect(await effects.count(`o-${RUN}`)).toBe(1);
    expect(await deadLetters()).toBe(0);
  });

  it('auto ack (Nest default): a message without an id is logged with the consumer and the missing field, never silently dropped', async () => {
    const app = await startApp(AutoAckConsumer, AUTO_QUEUE, true);
    try {
      publish(AUTO_QUEUE, { note: 'anonymous' });
      await until(async () =>
        errors.mock.calls.some((c) =>
          /shipments-auto refused a message: payload path "id" is missing/.test(String(c[0])),
        ),
      );
      publish(AUTO_QUEUE, { id: `a-${RUN}` });
      await until(async () => (await effects.count(`a-${RUN}`)) === 1);
    } finally {
      await app.close();
    }
    expect(await effects.count()).toBe(2);
  });
});
