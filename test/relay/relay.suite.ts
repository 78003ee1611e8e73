import { Controller, Global, INestApplication, Inject, Module } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { randomBytes, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { DataSource, EntityManager } from 'typeorm';
import {
  ensureOutboxSchema,
  getOutboxRelayToken,
  Inbox,
  InboxManager,
  InboxModule,
  InboxService,
  OutboxEventInput,
  OutboxEvents,
  OutboxModule,
  OutboxRelay,
  OutboxRelayMessage,
  OutboxRelayModule,
  OutboxService,
} from 'nestjs-outbox';
import { forkFixture } from '../support/child-process';
import {
  createEffectTable,
  inboxTable,
  openInboxDataSource,
  uniquePrefix,
} from '../inbox/inbox-test-helpers';
import { KITS, KitName, RelayKit } from './relay-kits';
import { TcpProxy } from '../support/tcp-proxy';

const EFFECTS = Symbol('EFFECTS');
const CONSUMER = 'relay-consumer';

/**
 * What the consumer saw, in the order its inbox transactions committed. A handler run is only
 * `ran` until `@Inbox()` reports the message processed (after the commit): two copies of a
 * re-published message can run at once, and the one whose transaction rolls back must not count.
 * `published`: event ids in the order the relay's publishes were confirmed and acknowledged (the
 * producer's `delivered` events) — the order per key the relay promises. The consumer's commit
 * order is not that: Nest's NATS and MQTT servers start a handler per message without waiting for
 * the one before, so two events of a key published a few milliseconds apart can commit swapped
 * (docs/relay-and-scaling.md, "Per-key order").
 */
class Seen {
  ran = new Map<string, OutboxRelayMessage<{ n: number }>>();
  applied: OutboxRelayMessage<{ n: number }>[] = [];
  published: string[] = [];
  transport = new Map<string, { messageId?: string; traceparent?: string }>();
}

/** Gives the consumer's `InboxService` an `OutboxEvents` the test can listen to. */
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

/** Per key, the payload counters of `batch`'s events in the order the relay published them. */
function publishedOrder(published: string[], batch: OutboxEventInput[]) {
  const ids = new Map(batch.map((e) => [e.id!, e]));
  const byKey = new Map<string, number[]>();
  for (const id of published) {
    const e = ids.get(id);
    if (e) byKey.set(e.key!, [...(byKey.get(e.key!) ?? []), (e.payload as { n: number }).n]);
  }
  return byKey;
}

/** The relay end to end on one broker: producer app → relay → broker → consumer app with @Inbox(). */
export function relaySuite(name: KitName): void {
  const kit: RelayKit = KITS[name];
  const run = randomBytes(3).toString('hex');
  const type = kit.type(run);
  const prefix = uniquePrefix(`rl${name.slice(0, 2)}`);
  let dataSource: DataSource;
  let effects: Awaited<ReturnType<typeof createEffectTable>>;
  let proxy: TcpProxy;
  let consumer: INestApplication;
  let producer: INestApplication | null = null;
  const seen = new Seen();

  @Controller()
  class OrdersConsumer {
    constructor(@Inject(EFFECTS) private readonly fx: { insertSql: string }) {}

    @EventPattern(kit.pattern ? kit.pattern({ type }) : type)
    @Inbox({ consumer: CONSUMER })
    async onOrder(
      @Payload() message: OutboxRelayMessage<{ n: number }>,
      @InboxManager() manager: EntityManager,
      @Ctx() context: unknown,
    ): Promise<void> {
      await manager.query(this.fx.insertSql, [message.id, `${message.key}:${message.payload.n}`]);
      seen.ran.set(message.id, message);
      seen.transport.set(message.id, kit.inspect(context));
    }
  }

  async function startProducer(): Promise<INestApplication> {
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: { type: 'typeorm', dataSource, tablePrefix: prefix },
          dispatcher: {
            pollInterval: 100,
            leaseMs: 3_000,
            backoff: { initialMs: 100, maxMs: 800, jitter: 0.2 },
            maxAttempts: 1_000,
          },
        }),
        OutboxRelayModule.register({
          name: 'relay',
          client: kit.client(proxy.port, run),
          types: type,
          pattern: kit.pattern,
          publishTimeoutMs: 1_500,
        }),
      ],
    })
    class ProducerApp {}
    const moduleRef = await Test.createTestingModule({ imports: [ProducerApp] }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    app.get(OutboxEvents).on('delivered', (e) => {
      if (e.type === type) seen.published.push(e.eventId);
    });
    return app;
  }

  const relay = () => producer!.get<OutboxRelay>(getOutboxRelayToken('relay'));
  const events = (key: string, from: number, count: number): OutboxEventInput[] =>
    Array.from({ length: count }, (_, i) => ({
      id: randomUUID(),
      type,
      key,
      payload: { n: from + i },
      headers: { traceparent: `00-${randomBytes(16).toString('hex')}-${'1'.repeat(16)}-01` },
    }));

  beforeAll(async () => {
    dataSource = await openInboxDataSource('postgres');
    effects = await createEffectTable(dataSource, `${prefix}effects`);
    await ensureOutboxSchema(dataSource, { tablePrefix: prefix });
    proxy = await TcpProxy.start(kit.target);
    await kitSetup(kit, run);
    @Module({
      imports: [
        ConsumerEventsModule,
        InboxModule.forRoot({ dataSource, tablePrefix: prefix, cleanupIntervalMs: 0 }),
      ],
      controllers: [OrdersConsumer],
      providers: [{ provide: EFFECTS, useValue: effects }],
    })
    class ConsumerApp {}
    const moduleRef = await Test.createTestingModule({ imports: [ConsumerApp] }).compile();
    consumer = moduleRef.createNestApplication({ logger: false });
    consumer.get(OutboxEvents).on('inbox-processed', ({ consumer: name, messageId }) => {
      if (name === CONSUMER) seen.applied.push(seen.ran.get(messageId)!);
    });
    consumer.connectMicroservice(kit.server(run));
    await consumer.startAllMicroservices();
    await consumer.init();
    producer = await startProducer();
  }, 60_000);

  afterAll(async () => {
    await producer?.close();
    await consumer?.close();
    await proxy?.close();
    await kitTeardown(kit, run);
    await effects?.drop();
    await inboxTable(dataSource, prefix).drop();
    await dataSource?.query(`DROP TABLE IF EXISTS "${prefix}outbox_deliveries"`);
    await dataSource?.query(`DROP TABLE IF EXISTS "${prefix}outbox_dead_letters"`);
    await dataSource?.query(`DROP TABLE IF EXISTS "${prefix}outbox_events"`);
    await dataSource?.query(`DROP TABLE IF EXISTS "${prefix}outbox_schema_version"`);
    await dataSource?.destroy();
  }, 30_000);

  it('events appended in a transaction arrive once each, in order per key, with id, type, key, occurredAt and trace context; a rolled-back append sends nothing', async () => {
    const outbox = producer!.get(OutboxService);
    const batch = [...events('a', 0, 10), ...events('b', 0, 10), ...events('c', 0, 10)];
    const rolledBack = events('rolled-back', 0, 1);
    await dataSource
      .transaction(async (manager) => {
        await outbox.append(rolledBack, { manager });
        throw new Error('rollback');
      })
      .catch(() => undefined);
    await dataSource.transaction((manager) => outbox.append(batch, { manager }));
    await until(() => seen.applied.length >= 30, 20_000, '30 messages');
    await new Promise((r) => setTimeout(r, 300));

    expect(await effects.count()).toBe(30);
    for (const event of batch) expect(await effects.count(event.id!)).toBe(1);
    const order = publishedOrder(seen.published, batch);
    expect(order.size).toBe(new Set(batch.map((e) => e.key)).size);
    for (const [key, ns] of order)
      expect([key, ns]).toEqual([key, Array.from({ length: 10 }, (_, i) => i)]);

    const first = batch[0];
    const message = seen.applied.find((m) => m.id === first.id)!;
    expect(message).toMatchObject({ id: first.id, type, key: 'a', payload: { n: 0 } });
    expect(new Date(message.occurredAt).toISOString()).toBe(message.occurredAt);
    expect(message.headers.traceparent).toBe(first.headers!.traceparent);
    expect(seen.transport.get(first.id!)).toEqual({
      messageId: first.id,
      traceparent: first.headers!.traceparent,
    });
    // Every event was confirmed at least once. On a loaded machine a confirm can miss
    // publishTimeoutMs (a failed attempt, retried) or a lease can lapse (a re-publish the inbox
    // absorbs), so the exact counts vary; the effects above are what is promised.
    const stats = relay().stats();
    expect(stats.published).toBeGreaterThanOrEqual(30);
  }, 40_000);

  it('a broker outage: publishes fail and are retried with backoff, nothing is acknowledged unconfirmed, and after recovery every event arrives and is applied once', async () => {
    const outbox = producer!.get(OutboxService);
    seen.applied = [];
    const before = relay().stats();
    proxy.disconnect();
    const batch = [...events('x', 0, 10), ...events('y', 0, 10)];
    await dataSource.transaction((manager) => outbox.append(batch, { manager }));
    await until(() => relay().stats().failed >= before.failed + 3, 20_000, 'failed publishes');
    expect(relay().stats().published).toBe(before.published);
    proxy.restore();
    await until(
      async () => (await Promise.all(batch.map((e) => effects.count(e.id!)))).every((n) => n >= 1),
      40_000,
      'every event applied after recovery',
    );
    await new Promise((r) => setTimeout(r, 500));
    for (const event of batch) expect(await effects.count(event.id!)).toBe(1);
    const order = publishedOrder(seen.published, batch);
    expect(order.size).toBe(new Set(batch.map((e) => e.key)).size);
    for (const [key, ns] of order)
      expect([key, ns]).toEqual([key, Array.from({ length: 10 }, (_, i) => i)]);
  }, 90_000);

  it('a broker unreachable when the relay starts: its first publishes fail and are retried, and everything arrives once it is reachable', async () => {
    await producer!.close();
    proxy.disconnect();
    producer = await startProducer();
    const batch = events('late', 0, 5);
    await dataSource.transaction((manager) =>
      producer!.get(OutboxService).append(batch, { manager }),
    );
    await until(() => relay().stats().failed >= 2, 20_000, 'failed publishes');
    expect(relay().stats().published).toBe(0);
    proxy.restore();
    await until(
      async () => (await Promise.all(batch.map((e) => effects.count(e.id!)))).every((n) => n >= 1),
      40_000,
      'every event applied after the broker became reachable',
    );
    for (const event of batch) expect(await effects.count(event.id!)).toBe(1);
  }, 90_000);

  it('a relay killed after the broker confirmed but before the ack: the next worker re-publishes, the consumer applies the event once', async () => {
    await producer!.close();
    producer = null;
    const duplicatesBefore = consumer.get(InboxService).stats().duplicates;
    const id = randomUUID();
    const child = forkFixture(join(__dirname, 'fixtures', 'crash-relay.ts'), {
      RELAY_KIT: name,
      RELAY_RUN: run,
      RELAY_PREFIX: prefix,
      RELAY_PORT: String(proxy.port),
      RELAY_EVENT_ID: id,
    });
    try {
      await expect(child.next()).resolves.toEqual({ published: id });
    } finally {
      await child.kill();
    }
    await until(async () => (await effects.count(id)) === 1, 10_000, 'first application');

    producer = await startProducer();
    await until(
      () => relay().stats().published === 1,
      20_000,
      're-publish after the lease expired',
    );
    await until(
      () => consumer.get(InboxService).stats().duplicates > duplicatesBefore,
      10_000,
      'the consumer to see the duplicate',
    );
    expect(await effects.count(id)).toBe(1);
  }, 60_000);
}

async function kitSetup(kit: RelayKit, run: string): Promise<void> {
  if (kit.name === 'nats') {
    const { connect } = await import('nats');
    const nc = await connect({ servers: `nats://${kit.target.host}:${kit.target.port}` });
    await (
      await nc.jetstreamManager()
    ).streams.add({
      name: `relay-${run}`,
      subjects: [`relay-${run}.>`],
    });
    await nc.close();
  }
}

async function kitTeardown(kit: RelayKit, run: string): Promise<void> {
  if (kit.name === 'nats') {
    const { connect } = await import('nats');
    const nc = await connect({ servers: `nats://${kit.target.host}:${kit.target.port}` });
    await (await nc.jetstreamManager()).streams.delete(`relay-${run}`).catch(() => undefined);
    await nc.close();
  }
  if (kit.name === 'rabbitmq') {
    const amqp = await import('amqplib');
    const connection = await amqp.connect(
      `amqp://guest:guest@${kit.target.host}:${kit.target.port}`,
    );
    const channel = await connection.createChannel();
    await channel.deleteQueue(`relay-${run}`).catch(() => undefined);
    await connection.close().catch(() => undefined);
  }
}
