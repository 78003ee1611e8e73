/* nestjs-outbox through its real NestJS path: OutboxModule.forRoot + @OutboxHandler + ScheduleModule. */
import { DynamicModule, Injectable, INestApplicationContext, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import type { DataSource } from 'typeorm';
import { orderPayload } from './business';
import { OUR_REDIS_PREFIX, REDIS_URL, SentStatement, TABLE_PREFIX, watchPrepared } from './common';
import { lib, OutboxDispatcherOptions, OutboxEvent } from './lib';

const { OutboxDispatcher, OutboxHandler, OutboxModule, OutboxService } = lib;

export const EVENT_TYPE = 'order.placed';
/** The handler's name, as stored in the deliveries' `handler` column. */
export const HANDLER_NAME = 'bench.noop';

/**
 * The parameters of the library's one-event append statement for business row `id` (the `i`th):
 * what `stmt-*` and `append-cpu` send without the library, ids from the build's `newId`.
 */
export function appendOneValues(newId: () => string, id: string, i: number): unknown[] {
  return [
    newId(),
    EVENT_TYPE,
    id,
    JSON.stringify(orderPayload(id, i)),
    '{}',
    new Date().toISOString(),
    null,
    [newId()],
    [HANDLER_NAME],
  ];
}

/** What the handler does; set by the scenario before the dispatcher starts. */
export const sink: { onEvent: (event: OutboxEvent) => void } = { onEvent: () => undefined };

@Injectable()
export class BenchHandler {
  @OutboxHandler(EVENT_TYPE, { name: HANDLER_NAME })
  async handle(event: OutboxEvent): Promise<void> {
    sink.onEvent(event);
  }
}

/** Most events a call of the batch handler receives (`ours-<store>-batch`). */
export const BATCH_MAX = Number(process.env.BENCH_BATCH_MAX ?? 100);

/** Calls of the batch handler (events per call = handled ÷ calls). */
export const batchCalls = { n: 0 };

/** The same no-op work as `BenchHandler`, one call per batch of up to `BATCH_MAX` events. */
@Injectable()
export class BenchBatchHandler {
  @OutboxHandler(EVENT_TYPE, { name: HANDLER_NAME, batch: { max: BATCH_MAX } })
  async handle(events: OutboxEvent[]): Promise<void> {
    batchCalls.n++;
    for (const event of events) sink.onEvent(event);
  }
}

@Module({})
class BenchAppModule {
  static forRoot(
    store: unknown,
    dispatcher: OutboxDispatcherOptions,
    handler: 'single' | 'batch' = 'single',
  ): DynamicModule {
    return {
      module: BenchAppModule,
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: store as never,
          dispatcher,
          // Cleanup would run once a minute; keep it out of the measurements.
          retention: { cleanupIntervalMs: 0 },
        }),
      ],
      providers: [handler === 'batch' ? BenchBatchHandler : BenchHandler],
    };
  }
}

export type OurStore =
  | { kind: 'typeorm'; dataSource: DataSource; tablePrefix?: string }
  | { kind: 'sql'; executor: unknown; tablePrefix?: string }
  | { kind: 'redis'; prefix?: string };

export interface OurApp {
  app: INestApplicationContext;
  outbox: InstanceType<typeof OutboxService>;
  dispatcher: InstanceType<typeof OutboxDispatcher>;
  close(): Promise<void>;
}

export async function createOurApp(
  store: OurStore,
  dispatcher: OutboxDispatcherOptions,
  handler: 'single' | 'batch' = 'single',
): Promise<OurApp> {
  const storeOptions =
    store.kind === 'typeorm'
      ? {
          type: 'typeorm',
          dataSource: store.dataSource,
          tablePrefix: store.tablePrefix ?? TABLE_PREFIX,
          ensureSchema: true,
        }
      : store.kind === 'sql'
        ? {
            type: 'sql',
            executor: store.executor,
            tablePrefix: store.tablePrefix ?? TABLE_PREFIX,
            ensureSchema: true,
          }
        : { type: 'redis', url: REDIS_URL, prefix: store.prefix ?? OUR_REDIS_PREFIX };
  const app = await NestFactory.createApplicationContext(
    BenchAppModule.forRoot(storeOptions, dispatcher, handler),
    { logger: ['error', 'warn'] },
  );
  await app.init();
  return {
    app,
    outbox: app.get(OutboxService),
    dispatcher: app.get(OutboxDispatcher),
    close: () => app.close(),
  };
}

/**
 * The library's one-event append statement as it sends it (prepared name and text): one real
 * append in a rolled-back transaction, watched.
 */
export async function captureAppendStatement(
  ds: DataSource,
  app: OurApp,
): Promise<{ name: string; text: string }> {
  const qr = ds.createQueryRunner();
  await qr.startTransaction();
  let sent: SentStatement[];
  try {
    sent = await watchPrepared(ds, () =>
      app.outbox.append({ type: EVENT_TYPE, payload: {} }, { manager: qr.manager }),
    );
  } finally {
    await qr.rollbackTransaction();
    await qr.release();
  }
  if (sent.length === 0) throw new Error('stmt: the append sent no prepared statement');
  return { name: sent[0].name, text: sent[0].text };
}
