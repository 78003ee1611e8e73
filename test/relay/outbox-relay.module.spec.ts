import { Module } from '@nestjs/common';
import {
  ClientProxy,
  ClientsModule,
  ReadPacket,
  Transport,
  WritePacket,
} from '@nestjs/microservices';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import {
  getOutboxRelayToken,
  MemoryOutboxStore,
  OutboxModule,
  OutboxRelay,
  OutboxRelayModule,
  OutboxRelayOptions,
  OutboxRelayOptionsError,
  OutboxService,
} from 'nestjs-outbox';

/** A client whose emit settles when the test says so: the relay's confirmation boundary. */
class RecordingClient extends ClientProxy {
  readonly emitted: ReadPacket[] = [];
  fail: Error | null = null;
  hang = false;
  async connect(): Promise<void> {}
  async close(): Promise<void> {}
  unwrap<T>(): T {
    return undefined as T;
  }
  protected publish(_packet: ReadPacket, callback: (packet: WritePacket) => void): () => void {
    callback({ response: undefined, isDisposed: true });
    return () => undefined;
  }
  protected async dispatchEvent<T = any>(packet: ReadPacket): Promise<T> {
    if (this.fail) throw this.fail;
    if (this.hang) return new Promise<T>(() => undefined);
    this.emitted.push(packet);
    return undefined as T;
  }
}

async function start(relay: Partial<OutboxRelayOptions>, client = new RecordingClient()) {
  const store = new MemoryOutboxStore();
  @Module({
    imports: [
      ScheduleModule.forRoot(),
      OutboxModule.forRoot({
        store: { type: 'custom', store },
        dispatcher: { pollInterval: 20, backoff: { initialMs: 20, jitter: 0 } },
      }),
      OutboxRelayModule.register({ name: 'r', client: 'BROKER', types: 'a.b', ...relay }),
    ],
    providers: [{ provide: 'BROKER', useValue: client }],
  })
  class App {}
  const app = (await Test.createTestingModule({ imports: [App] }).compile()).createNestApplication({
    logger: false,
  });
  await app.init();
  return { app, store, client, relay: app.get<OutboxRelay>(getOutboxRelayToken('r')) };
}

async function until(check: () => boolean | Promise<boolean>, ms = 5_000) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('OutboxRelayModule', () => {
  it.each([
    ['name', { name: '' }],
    ['name', { name: '*' }],
    ['name', { name: 'relay\u0000' }],
    ['name', { name: 'relay-\udc00' }],
    ['publishTimeout', { publishTimeout: 5_000 }],
    ['client', { client: undefined }],
    ['types', { types: [] }],
    ['types', { types: 'a/b' }],
    ['filter', { filter: 'yes' }],
    ['pattern', { pattern: 'p' }],
    ['publishTimeoutMs', { publishTimeoutMs: 0 }],
    ['mqttQos', { mqttQos: 0 }],
    ['cloudEvents', { cloudEvents: true }],
    ['cloudEvents.source', { cloudEvents: {} }],
    ['cloudEvents.source', { cloudEvents: { source: '' } }],
    ['cloudEvents.source', { cloudEvents: { source: 'orders service' } }],
    ['cloudEvents.source', { cloudEvents: { source: '/orders/%zz' } }],
    ['cloudEvents.mode', { cloudEvents: { source: '/orders', mode: 'batch' } }],
    ['cloudEvents.sources', { cloudEvents: { sources: '/orders' } }],
  ] as [string, object][])('refuses a bad %s (%j), naming it', (field, bad) => {
    const options = { name: 'r', client: 'BROKER', types: 'a.b', ...bad } as OutboxRelayOptions;
    expect(() => OutboxRelayModule.register(options)).toThrow(OutboxRelayOptionsError);
    expect(() => OutboxRelayModule.register(options)).toThrow(`"${field}"`);
  });

  it('a client token nothing provides fails at bootstrap with the fix', async () => {
    @Module({
      imports: [
        OutboxModule.forRoot({ store: { type: 'memory' }, dispatcher: { enabled: false } }),
        OutboxRelayModule.register({ name: 'r', client: 'MISSING', types: 'a.b' }),
      ],
    })
    class App {}
    const app = (
      await Test.createTestingModule({ imports: [App] }).compile()
    ).createNestApplication({ logger: false });
    await expect(app.init()).rejects.toThrow(
      /no ClientProxy is provided under MISSING.*ClientsModule/,
    );
    await app.close();
  });

  it('a client registered with ClientsModule is found by its name and its transport recognised', async () => {
    @Module({
      imports: [
        OutboxModule.forRoot({ store: { type: 'memory' }, dispatcher: { enabled: false } }),
        ClientsModule.register([{ name: 'RMQ', transport: Transport.RMQ, options: {} }]),
        OutboxRelayModule.register({ name: 'r', client: 'RMQ', types: 'a.b' }),
      ],
    })
    class App {}
    const app = (
      await Test.createTestingModule({ imports: [App] }).compile()
    ).createNestApplication({ logger: false });
    await app.init();
    expect(app.get<OutboxRelay>(getOutboxRelayToken('r')).transport).toBe('rmq');
    await app.close();
  });

  it('publishes the envelope under the pattern, skips what filter refuses, and retries a failed emit', async () => {
    const { app, store, client, relay } = await start({
      types: ['a.b', 'a.c'],
      filter: (event) => event.type !== 'a.c',
      pattern: (event) => `orders.${event.type}`,
    });
    try {
      expect(relay.transport).toBe('other');
      client.fail = new Error('broker said no');
      const [event] = await app.get(OutboxService).append([
        { type: 'a.b', key: 'k', payload: { x: 1 } },
        { type: 'a.c', payload: {} },
      ]);
      await until(() => relay.stats().failed >= 2);
      expect(client.emitted).toEqual([]);
      client.fail = null;
      await until(async () => (await store.stats()).pending === 0 && relay.stats().published === 1);
      expect(relay.stats()).toMatchObject({ published: 1, skipped: 1 });
      expect(client.emitted).toEqual([
        {
          pattern: 'orders.a.b',
          data: {
            id: event.id,
            type: 'a.b',
            key: 'k',
            occurredAt: event.occurredAt.toISOString(),
            payload: { x: 1 },
            headers: {},
          },
        },
      ]);
    } finally {
      await app.close();
    }
  });

  it('CloudEvents on a transport without a binding here (Kafka, Redis, TCP, custom) fail at bootstrap, naming the option', async () => {
    const store = new MemoryOutboxStore();
    @Module({
      imports: [
        OutboxModule.forRoot({ store: { type: 'custom', store }, dispatcher: { enabled: false } }),
        OutboxRelayModule.register({
          name: 'r',
          client: 'BROKER',
          types: 'a.b',
          cloudEvents: { source: '/orders' },
        }),
      ],
      providers: [{ provide: 'BROKER', useValue: new RecordingClient() }],
    })
    class App {}
    const app = (
      await Test.createTestingModule({ imports: [App] }).compile()
    ).createNestApplication({ logger: false });
    await expect(app.init()).rejects.toThrow(
      /"cloudEvents": .*RabbitMQ, NATS or MQTT.*RecordingClient/,
    );
    await app.close();
  });

  it('binary CloudEvents on an MQTT 3.1.1 client fail at bootstrap: the binding has no binary mode there', async () => {
    @Module({
      imports: [
        OutboxModule.forRoot({ store: { type: 'memory' }, dispatcher: { enabled: false } }),
        OutboxRelayModule.register({
          name: 'r',
          client: { transport: Transport.MQTT, options: { url: 'mqtt://127.0.0.1:1' } },
          types: 'a.b',
          cloudEvents: { source: '/orders', mode: 'binary' },
        }),
      ],
    })
    class App {}
    const app = (
      await Test.createTestingModule({ imports: [App] }).compile()
    ).createNestApplication({ logger: false });
    await expect(app.init()).rejects.toThrow(
      /"cloudEvents.mode": .*MQTT 3.1.1.*protocolVersion: 5/,
    );
    await app.close();
  });

  it('a publish not confirmed within publishTimeoutMs fails its attempt with RelayPublishTimeoutError and is retried', async () => {
    const client = new RecordingClient();
    client.hang = true;
    const { app, store, relay } = await start({ publishTimeoutMs: 50, maxAttempts: 2 }, client);
    try {
      const event = await app.get(OutboxService).append({ type: 'a.b', payload: {} });
      await until(async () => (await store.stats()).dead === 1);
      expect(relay.stats()).toMatchObject({ published: 0, failed: 2 });
      const [dead] = (await store.listDeadLetters({ limit: 1 })).items;
      expect(dead.errors.map((e) => e.name)).toEqual([
        'RelayPublishTimeoutError',
        'RelayPublishTimeoutError',
      ]);
      expect(dead.errors[0].message).toContain(`event ${event.id} within 50 ms`);
    } finally {
      await app.close();
    }
  });
});
