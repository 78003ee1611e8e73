import { INestApplication, Injectable } from '@nestjs/common';
import {
  AggregateRoot,
  CqrsModule,
  EventBus,
  EventPublisher,
  EventsHandler,
  IEventHandler,
} from '@nestjs/cqrs';
import { Test } from '@nestjs/testing';
import {
  OUTBOX_STORE,
  OutboxCqrsModule,
  OutboxCqrsModuleOptions,
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxStore,
} from 'nestjs-outbox';

/** No decorator: `allEvents` sends it through the outbox under its class name. */
class StockReserved {
  constructor(
    readonly sku: string,
    readonly at: Date,
  ) {}
}

class Stock extends AggregateRoot {
  constructor(readonly id: string) {
    super();
  }

  reserve(): void {
    this.apply(new StockReserved(this.id, new Date('2026-01-02T03:04:05Z')));
  }
}

const received: StockReserved[] = [];

@EventsHandler(StockReserved)
class Reservations implements IEventHandler<StockReserved> {
  handle(event: StockReserved): void {
    received.push(event);
  }
}

const keys: (string | null)[] = [];

/** A plain outbox handler of the same type sees what was stored. */
@Injectable()
class KeyRecorder {
  @OutboxHandler('StockReserved')
  record(event: OutboxEvent): void {
    keys.push(event.key);
  }
}

async function start(options: OutboxCqrsModuleOptions): Promise<INestApplication> {
  const moduleRef = await Test.createTestingModule({
    imports: [
      CqrsModule.forRoot(),
      OutboxModule.forRoot({ store: { type: 'memory' }, dispatcher: { enabled: false } }),
      OutboxCqrsModule.forRoot(options),
    ],
    providers: [Reservations, KeyRecorder],
  }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  await app.init();
  return app;
}

describe('OutboxCqrsModule allEvents (memory store, no transaction)', () => {
  let app: INestApplication | undefined;
  afterEach(async () => {
    received.length = 0;
    keys.length = 0;
    await app?.close();
  });

  it('an undecorated event is appended under its class name, keyed by the aggregate id, and rebuilt as its class', async () => {
    app = await start({ allEvents: true });
    const stock = app.get(EventPublisher).mergeObjectContext(new Stock('sku-1'));
    stock.reserve();
    stock.commit();
    await new Promise((r) => setImmediate(r));
    expect(received).toEqual([]); // not in memory
    const store = app.get<OutboxStore>(OUTBOX_STORE);
    expect((await store.stats()).byType.StockReserved).toBeDefined();
    await app.get(OutboxDispatcher).drain();
    expect(received).toHaveLength(1);
    expect(received[0]).toBeInstanceOf(StockReserved);
    expect(received[0].sku).toBe('sku-1');
    expect(received[0].at).toBe('2026-01-02T03:04:05.000Z'); // JSON: a Date comes back as text
    expect(keys).toEqual(['sku-1']);
  });

  it('the module key wins over the aggregate id', async () => {
    app = await start({ allEvents: true, key: (event) => `k-${(event as StockReserved).sku}` });
    const [appended] = (await app
      .get(EventBus)
      .publishAll([new StockReserved('sku-2', new Date())])) as { key: string }[];
    expect(appended.key).toBe('k-sku-2');
  });

  it('without allEvents, an undecorated event stays in memory', async () => {
    app = await start({});
    app.get(EventBus).publish(new StockReserved('sku-3', new Date()));
    await new Promise((r) => setImmediate(r));
    expect(received.map((e) => e.sku)).toEqual(['sku-3']);
    expect(received[0].at).toBeInstanceOf(Date);
  });
});
