/**
 * CloudEvents on the wire: the relay publishes to RabbitMQ, NATS (JetStream) and MQTT 5 in
 * structured and binary mode; a Nest consumer with `CloudEventsDeserializer` and `@Inbox()` applies
 * each event once, also when the same CloudEvent arrives again. What arrived is read back per the
 * protocol binding and validated by the `cloudevents` SDK (a dev dependency, used as a checker).
 */
import { Controller, Global, INestApplication, Inject, Module } from '@nestjs/common';
import {
  Ctx,
  EventPattern,
  MicroserviceOptions,
  MqttContext,
  NatsContext,
  Payload,
  RmqContext,
  Transport,
} from '@nestjs/microservices';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { CloudEvent, MQTT } from 'cloudevents';
import { connect as natsConnect } from 'nats';
import { randomBytes } from 'node:crypto';
import { DataSource, EntityManager } from 'typeorm';
import {
  CloudEventsDeserializer,
  getOutboxRelayToken,
  Inbox,
  InboxManager,
  InboxModule,
  InboxService,
  MemoryOutboxStore,
  OutboxEvents,
  OutboxModule,
  OutboxRelay,
  OutboxRelayModule,
  OutboxService,
} from 'nestjs-outbox';
import type { OutboxRelayOptions } from 'nestjs-outbox';
import { describeWithService, SERVICES, ServiceName } from '../support/services';
import { TcpProxy } from '../support/tcp-proxy';
import {
  createEffectTable,
  inboxTable,
  openInboxDataSource,
  uniquePrefix,
} from '../inbox/inbox-test-helpers';

type Broker = 'rabbitmq' | 'nats' | 'mqtt';
type Mode = 'structured' | 'binary';

const SOURCE = '/nestjs-outbox/tests/orders';
const CONSUMER = 'ce-consumer';
const EFFECTS = Symbol('EFFECTS');

/** What one delivery looked like on the wire, as the consumer's transport context shows it. */
interface Received {
  /** Content type of the message (AMQP `content-type`, MQTT 5 `Content Type`, NATS `Content-Type` header). */
  contentType?: string;
  /** The transport headers that are CloudEvents attributes, with the binding's prefix removed. */
  attributes: Record<string, string>;
  /** The raw body. */
  body: string;
}

@Global()
@Module({ providers: [OutboxEvents], exports: [OutboxEvents] })
class ConsumerEventsModule {}

async function until(check: () => boolean | Promise<boolean>, ms: number, what: string) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Reads the wire per binding: AMQP `cloudEvents_`/`cloudEvents:` application properties. */
function fromRmq(context: RmqContext): Received {
  const { content, properties } = context.getMessage() as {
    content: Buffer;
    properties: { contentType?: string; headers?: Record<string, unknown> };
  };
  const attributes: Record<string, string> = {};
  for (const [name, value] of Object.entries(properties.headers ?? {})) {
    const match = /^cloudEvents[_:](.+)$/.exec(name);
    if (match) attributes[match[1]] = String(value);
  }
  return { contentType: properties.contentType, attributes, body: content.toString('utf8') };
}

/** NATS: `ce-` headers, percent-encoded values; `Content-Type` says structured. */
function fromNats(context: NatsContext, body: unknown): Received {
  const headers = context.getHeaders() as { keys(): string[]; get(name: string): string };
  const attributes: Record<string, string> = {};
  for (const name of headers.keys()) {
    if (name.toLowerCase().startsWith('ce-')) {
      attributes[name.slice(3).toLowerCase()] = decodeURIComponent(headers.get(name));
    }
  }
  return {
    contentType: headers.get('Content-Type') || undefined,
    attributes,
    body: JSON.stringify(body),
  };
}

/** MQTT 5: `Content Type` property and user properties named as the attributes. */
function fromMqtt(context: MqttContext): Received {
  const packet = context.getPacket() as unknown as {
    payload: Buffer;
    properties?: { contentType?: string; userProperties?: Record<string, string> };
  };
  return {
    contentType: packet.properties?.contentType,
    attributes: { ...packet.properties?.userProperties },
    body: packet.payload.toString('utf8'),
  };
}

/** The CloudEvent the binding describes, validated by the SDK (its constructor is strict). */
function toSdkEvent(broker: Broker, mode: Mode, received: Received): CloudEvent<unknown> {
  if (mode === 'structured') return new CloudEvent(JSON.parse(received.body));
  if (broker === 'mqtt') {
    // The SDK's own MQTT binding reads it too; it leaves datacontenttype to the caller.
    const viaBinding = MQTT.toEvent({
      headers: received.attributes,
      body: JSON.parse(received.body),
    }) as CloudEvent<unknown>;
    expect(MQTT.isEvent({ headers: received.attributes, body: received.body })).toBe(true);
    expect(viaBinding.validate()).toBe(true);
  }
  const datacontenttype =
    broker === 'nats' ? received.attributes.datacontenttype : received.contentType;
  return new CloudEvent({
    ...received.attributes,
    datacontenttype,
    data: JSON.parse(received.body),
  });
}

function cloudEventsSuite(broker: Broker, mode: Mode): void {
  const run = randomBytes(3).toString('hex');
  const type = `ce-${run}.order.placed`;
  const queue = `ce-${run}-${mode}`;
  const prefix = uniquePrefix(`ce${broker.slice(0, 2)}${mode.slice(0, 1)}`);
  const topic = type.replaceAll('.', '/');
  const pattern = broker === 'mqtt' ? topic : type;
  let dataSource: DataSource;
  let effects: Awaited<ReturnType<typeof createEffectTable>>;
  let consumer: INestApplication;
  let producer: INestApplication;
  let proxy: TcpProxy;
  const store = new MemoryOutboxStore();
  const received = new Map<string, Received[]>();
  const processedIds: string[] = [];
  const duplicateIds: string[] = [];

  // The relay reaches the broker through a proxy the outage test cuts.
  const clientOptions = (port: number): OutboxRelayOptions['client'] =>
    broker === 'rabbitmq'
      ? {
          transport: Transport.RMQ,
          options: {
            urls: [`amqp://guest:guest@127.0.0.1:${port}`],
            queue,
            socketOptions: { reconnectTimeInSeconds: 0.3, heartbeatIntervalInSeconds: 1 },
          },
        }
      : broker === 'nats'
        ? {
            transport: Transport.NATS,
            options: {
              servers: [`nats://127.0.0.1:${port}`],
              maxReconnectAttempts: -1,
              reconnectTimeWait: 200,
            },
          }
        : {
            transport: Transport.MQTT,
            options: { url: `mqtt://127.0.0.1:${port}`, protocolVersion: 5, reconnectPeriod: 200 },
          };

  const serverOptions = (): MicroserviceOptions => {
    const deserializer = new CloudEventsDeserializer();
    if (broker === 'rabbitmq') {
      return {
        transport: Transport.RMQ,
        options: {
          urls: [`amqp://guest:guest@127.0.0.1:${SERVICES.rabbitmq.port}`],
          queue,
          prefetchCount: 1,
          deserializer,
        },
      };
    }
    if (broker === 'nats') {
      return {
        transport: Transport.NATS,
        options: { servers: [`nats://127.0.0.1:${SERVICES.nats.port}`], deserializer },
      };
    }
    return {
      transport: Transport.MQTT,
      options: {
        url: `mqtt://127.0.0.1:${SERVICES.mqtt.port}`,
        protocolVersion: 5,
        subscribeOptions: { qos: 1 },
        deserializer,
      },
    };
  };

  @Controller()
  class OrdersConsumer {
    constructor(@Inject(EFFECTS) private readonly fx: { insertSql: string }) {}

    @EventPattern(pattern)
    @Inbox({ consumer: CONSUMER })
    async onOrder(
      @Payload() body: Record<string, any>,
      @InboxManager() manager: EntityManager,
      @Ctx() context: RmqContext & NatsContext & MqttContext,
    ): Promise<void> {
      const wire =
        broker === 'rabbitmq'
          ? fromRmq(context)
          : broker === 'nats'
            ? fromNats(context, body)
            : fromMqtt(context);
      const id = mode === 'structured' ? body.id : wire.attributes.id;
      received.set(id, [...(received.get(id) ?? []), wire]);
      const data = mode === 'structured' ? body.data : body;
      await manager.query(this.fx.insertSql, [id, `n=${data.n}`]);
    }
  }

  beforeAll(async () => {
    dataSource = await openInboxDataSource('postgres');
    effects = await createEffectTable(dataSource, `${prefix}effects`);
    proxy = await TcpProxy.start(SERVICES[broker]);
    if (broker === 'nats') {
      const nc = await natsConnect({ servers: `nats://127.0.0.1:${SERVICES.nats.port}` });
      await (
        await nc.jetstreamManager()
      ).streams.add({ name: `ce-${run}`, subjects: [`ce-${run}.>`] });
      await nc.close();
    }
    @Module({
      imports: [
        ConsumerEventsModule,
        InboxModule.forRoot({ dataSource, tablePrefix: prefix, cleanupIntervalMs: 0 }),
      ],
      controllers: [OrdersConsumer],
      providers: [{ provide: EFFECTS, useValue: effects }],
    })
    class ConsumerApp {}
    consumer = (
      await Test.createTestingModule({ imports: [ConsumerApp] }).compile()
    ).createNestApplication({
      logger: false,
    });
    consumer.get(OutboxEvents).on('inbox-processed', ({ consumer: name, messageId }) => {
      if (name === CONSUMER) processedIds.push(messageId);
    });
    consumer.get(OutboxEvents).on('inbox-duplicate', ({ consumer: name, messageId }) => {
      if (name === CONSUMER) duplicateIds.push(messageId);
    });
    consumer.connectMicroservice(serverOptions());
    await consumer.startAllMicroservices();
    await consumer.init();

    @Module({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: { type: 'custom', store },
          dispatcher: { pollInterval: 50, backoff: { initialMs: 100, jitter: 0 } },
        }),
        OutboxRelayModule.register({
          name: 'ce',
          client: clientOptions(proxy.port),
          publishTimeoutMs: 1_500,
          types: type,
          pattern: () => pattern,
          cloudEvents: { source: SOURCE, mode },
        }),
      ],
    })
    class ProducerApp {}
    producer = (
      await Test.createTestingModule({ imports: [ProducerApp] }).compile()
    ).createNestApplication({
      logger: false,
    });
    await producer.init();
  }, 60_000);

  afterAll(async () => {
    await producer?.close();
    await consumer?.close();
    await proxy?.close();
    if (broker === 'nats') {
      const nc = await natsConnect({ servers: `nats://127.0.0.1:${SERVICES.nats.port}` });
      await (await nc.jetstreamManager()).streams.delete(`ce-${run}`).catch(() => undefined);
      await nc.close();
    }
    if (broker === 'rabbitmq') {
      const amqp = await import('amqplib');
      const connection = await amqp.connect(
        `amqp://guest:guest@127.0.0.1:${SERVICES.rabbitmq.port}`,
      );
      const channel = await connection.createChannel();
      await channel.deleteQueue(queue).catch(() => undefined);
      await connection.close().catch(() => undefined);
    }
    await effects?.drop();
    await inboxTable(dataSource, prefix).drop();
    await dataSource?.destroy();
  }, 30_000);

  it(`arrives as a valid CloudEvent 1.0 (${mode} mode): id = event id, type, source, time = occurredAt, subject = key, data = payload, trace context as the tracing extension`, async () => {
    const traceparent = `00-${randomBytes(16).toString('hex')}-${randomBytes(8).toString('hex')}-01`;
    // The payload has an id of its own: in binary mode @Inbox() must still take the event's.
    const event = await producer.get(OutboxService).append({
      type,
      key: 'order-42',
      payload: { id: 'order-42', n: 1, note: 'Grüße "quoted" 100%' },
      headers: { traceparent, tracestate: 'vendor=a b', baggage: 'user=1' },
    });
    await until(() => processedIds.includes(event.id), 20_000, 'the event to be applied');
    expect(await effects.count(event.id)).toBe(1);
    expect(processedIds).toEqual([event.id]);

    const [wire] = received.get(event.id)!;
    expect(wire.contentType).toBe(
      mode === 'structured'
        ? 'application/cloudevents+json; charset=utf-8'
        : broker === 'nats'
          ? undefined
          : 'application/json',
    );
    if (mode === 'structured') expect(wire.attributes).toEqual({});
    const checked = toSdkEvent(broker, mode, wire);
    expect(checked.validate()).toBe(true);
    expect({ ...checked.toJSON() }).toEqual({
      specversion: '1.0',
      id: event.id,
      source: SOURCE,
      type,
      time: event.occurredAt.toISOString(),
      subject: 'order-42',
      datacontenttype: 'application/json',
      data: { id: 'order-42', n: 1, note: 'Grüße "quoted" 100%' },
      traceparent,
      tracestate: 'vendor=a b',
    });
  }, 40_000);

  it(`a CloudEvent delivered twice (${mode} mode) is applied once: @Inbox() reads its id`, async () => {
    const relay = producer.get<OutboxRelay>(getOutboxRelayToken('ce'));
    const event = await producer.get(OutboxService).append({ type, payload: { id: 'same', n: 2 } });
    await until(() => processedIds.includes(event.id), 20_000, 'the first delivery');
    const duplicates = consumer.get(InboxService).stats().duplicates;
    // The same event published again, as after a crash between the broker's confirm and the ack.
    await relay.relay(event);
    await until(
      () => duplicateIds.includes(event.id),
      20_000,
      'the consumer to see the redelivery',
    );
    // @Inbox() recognised the second copy by the event id and skipped the method.
    expect(consumer.get(InboxService).stats().duplicates).toBe(duplicates + 1);
    expect(received.get(event.id)).toHaveLength(1);
    expect(await effects.count(event.id)).toBe(1);
    expect(processedIds.filter((id) => id === event.id)).toHaveLength(1);
  }, 40_000);

  it(`a broker outage (${mode} mode): publishes fail and are retried, and after recovery each event arrives and is applied once`, async () => {
    const relay = producer.get<OutboxRelay>(getOutboxRelayToken('ce'));
    const before = relay.stats();
    proxy.disconnect();
    const events = await producer
      .get(OutboxService)
      .append(Array.from({ length: 5 }, (_, n) => ({ type, key: `k${n % 2}`, payload: { n } })));
    await until(() => relay.stats().failed >= before.failed + 2, 20_000, 'failed publishes');
    expect(relay.stats().published).toBe(before.published);
    proxy.restore();
    await until(
      () => events.every((e) => processedIds.includes(e.id)),
      40_000,
      'every event applied after recovery',
    );
    await new Promise((r) => setTimeout(r, 300));
    for (const event of events) expect(await effects.count(event.id)).toBe(1);
  }, 90_000);
}

for (const [broker, service] of [
  ['rabbitmq', 'rabbitmq'],
  ['nats', 'nats'],
  ['mqtt', 'mqtt'],
] as [Broker, ServiceName][]) {
  for (const mode of ['structured', 'binary'] as Mode[]) {
    describeWithService(service, `OutboxRelayModule CloudEvents over ${broker}, ${mode} mode`, () =>
      cloudEventsSuite(broker, mode),
    );
  }
}
