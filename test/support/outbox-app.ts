import { INestApplication, Provider, Type } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import {
  MemoryOutboxStore,
  OutboxDispatcher,
  OutboxDispatcherOptions,
  OutboxModule,
  OutboxModuleOptions,
  OutboxService,
  OutboxStore,
} from 'nestjs-outbox';

export interface TestApp {
  app: INestApplication;
  outbox: OutboxService;
  dispatcher: OutboxDispatcher;
  store: OutboxStore;
  get<T>(type: Type<T>): T;
}

/** Builds a real Nest app with OutboxModule on the given store (a fresh memory store by default). */
export async function createOutboxApp(
  providers: Provider[],
  options: {
    store?: OutboxStore;
    dispatcher?: OutboxDispatcherOptions;
    module?: Partial<OutboxModuleOptions>;
  } = {},
): Promise<TestApp> {
  const store = options.store ?? new MemoryOutboxStore();
  const moduleRef = await Test.createTestingModule({
    imports: [
      ScheduleModule.forRoot(),
      OutboxModule.forRoot({
        store: { type: 'custom', store },
        dispatcher: {
          pollInterval: 100,
          leaseMs: 3_000,
          backoff: { initialMs: 100, jitter: 0 },
          ...options.dispatcher,
        },
        ...options.module,
      }),
    ],
    providers,
  }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  await app.init();
  return {
    app,
    store,
    outbox: app.get(OutboxService),
    dispatcher: app.get(OutboxDispatcher),
    get: (type) => app.get(type),
  };
}

export function deferred<T = void>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Advances Jest's fake time, then lets real `setImmediate` work (coalesced acks, re-polls) run. */
export async function tick(ms: number): Promise<void> {
  await jest.advanceTimersByTimeAsync(ms);
  for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
}
