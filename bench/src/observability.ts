/*
 * Observability overhead (issue 13) — dispatch throughput with metrics and tracing on vs off.
 * N events (default 20 000, no key) are appended first (not timed); then one worker starts with a
 * no-op handler; events/s = N / (worker start → the N-th handler call), as in the dispatch
 * scenario, and the worker process's CPU microseconds per event over the same span (the machine
 * is shared: CPU time moves less with the other processes' load than wall time does).
 *
 * Variants (each in its own process, see run.ts): <store>-off, <store>-sdk and <store>-on,
 * <store> one of pg, sqlite (WAL), memory, redis (redis-* by hand: `src/observability.ts redis-on`). All at `concurrency: 100, batchSize: 100`, logs at
 * their default.
 *   -off  no `metrics`, no `tracing` (the defaults), no OpenTelemetry SDK in the process.
 *   -sdk  the same options, in a process with a real OpenTelemetry SDK registered: a
 *         BasicTracerProvider whose BatchSpanProcessor hands every span to an exporter that
 *         discards it, the AsyncLocalStorage context manager (entered once, as an app's
 *         instrumentations do, which turns its async hooks on) and the W3C propagator. An app
 *         that traces has these whatever the outbox does; on Node 20 the context manager's
 *         async hooks slow every promise in the process, the outbox's included.
 *   -on   that SDK plus `metrics: { registry }` (a prom-client Registry of its own; gauges
 *         refreshed every 15 s as by default) and `tracing: true`. The events are appended with
 *         tracing on, so each carries a traceparent the handler span continues.
 * on / sdk is what turning the outbox's metrics and tracing on costs (the issue's ≥ 0.9×);
 * on / off adds the SDK's own cost, reported for the full picture.
 * The memory store is the worst case for the ratio (no I/O to hide the per-delivery work).
 * Every -on run checks that the registry counted N deliveries and the exporter saw N handler
 * spans.
 *
 * A handler that does some I/O, as real ones do: suffix `-timer` (it awaits a timer of
 * BENCH_O11Y_TIMER_MS, default 1 ms, standing for a call to another service) or
 * `-query` (one `SELECT` through the bench's own TypeORM DataSource, pg and sqlite only), e.g.
 * `pg-on-query`; without a suffix the handler does nothing.
 */
import { DynamicModule, Injectable, Module } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { NestFactory } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  ReadableSpan,
  SpanExporter,
  TraceIdRatioBasedSampler,
} from '@opentelemetry/sdk-trace-base';
import { Registry } from 'prom-client';
import type { DataSource } from 'typeorm';
import {
  args,
  deleteRedisKeys,
  dropOutboxTables,
  emit,
  envInt,
  now,
  openDataSource,
  REDIS_URL,
  removeSqliteFile,
  runMain,
  waitFor,
} from './common';
import { lib, OutboxEvent } from './lib';
import { EVENT_TYPE, HANDLER_NAME, sink } from './ours';

const { OutboxDispatcher, OutboxHandler, OutboxModule, OutboxService } = lib;

/** What the handler awaits before it counts the event (the variant's suffix). */
const work: { run: () => Promise<unknown> } = { run: () => Promise.resolve() };

@Injectable()
class O11yHandler {
  @OutboxHandler(EVENT_TYPE, { name: HANDLER_NAME })
  async handle(event: OutboxEvent): Promise<void> {
    await work.run();
    sink.onEvent(event);
  }
}
const N = envInt('BENCH_O11Y_N', 20_000);
const TIMEOUT_MS = envInt('BENCH_O11Y_TIMEOUT_MS', 300_000);
/** Not the dispatch scenario's prefix, so neither cleanup touches the other's tables. */
const PREFIX = 'bench_o11y_';
const REDIS_PREFIX = 'bench-o11y';
/** BENCH_O11Y_SAMPLE=0.1 samples 10 % of traces (parent-based); default: every trace. */
const SAMPLE = Number(process.env.BENCH_O11Y_SAMPLE ?? 1);

/** Counts exported spans and drops them: the SDK's full path, no network. */
class CountingExporter implements SpanExporter {
  handlerSpans = 0;
  export(spans: ReadableSpan[], done: (result: { code: number }) => void): void {
    for (const s of spans) if (s.name === `process ${EVENT_TYPE}`) this.handlerSpans++;
    done({ code: 0 });
  }
  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

@Module({})
class O11yBenchModule {
  static forRoot(store: unknown, extra: Record<string, unknown>): DynamicModule {
    return {
      module: O11yBenchModule,
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: store as never,
          dispatcher: { enabled: false, concurrency: 100, batchSize: 100 },
          retention: { cleanupIntervalMs: 0 },
          ...extra,
        }),
      ],
      providers: [O11yHandler],
    };
  }
}

/** `BENCH_O11Y_PARTS=metrics` or `tracing` turns on one of them only (for finding the cost). */
function onOptions(registry: Registry): Record<string, unknown> {
  const parts = (process.env.BENCH_O11Y_PARTS ?? 'metrics,tracing').split(',');
  return {
    ...(parts.includes('metrics') ? { metrics: { registry } } : {}),
    ...(parts.includes('tracing') ? { tracing: true } : {}),
  };
}

async function main(): Promise<void> {
  const { variant, round } = args();
  const match = /^(pg|sqlite|memory|redis)-(on|sdk|off)(?:-(timer|query))?$/.exec(variant);
  if (!match) throw new Error(`unknown variant ${variant}`);
  const [, store, mode, handlerWork] = match;
  const on = mode === 'on';

  let ds: DataSource | null = null;
  if (store === 'pg') ds = await openDataSource('postgres');
  if (store === 'sqlite') {
    removeSqliteFile();
    ds = await openDataSource('sqlite-wal');
  }
  if (ds) await dropOutboxTables(ds, PREFIX);
  if (store === 'redis') await deleteRedisKeys(`{${REDIS_PREFIX}}*`);
  if (handlerWork === 'timer') {
    const ms = envInt('BENCH_O11Y_TIMER_MS', 1);
    work.run = () => new Promise((resolve) => setTimeout(resolve, ms));
  }
  if (handlerWork === 'query') {
    if (!ds) throw new Error(`${variant}: -query needs a SQL store`);
    const query = ds;
    let n = 0;
    work.run = () => query.query(store === 'pg' ? 'SELECT $1::int AS n' : 'SELECT ? AS n', [n++]);
  }
  const storeOptions = ds
    ? { type: 'typeorm', dataSource: ds, tablePrefix: PREFIX, ensureSchema: true }
    : store === 'redis'
      ? { type: 'redis', url: REDIS_URL, prefix: REDIS_PREFIX }
      : { type: 'memory' };

  const registry = new Registry();
  const exporter = new CountingExporter();
  const provider = new BasicTracerProvider({
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(SAMPLE) }),
    spanProcessors: [
      new BatchSpanProcessor(exporter, { maxQueueSize: 8192, scheduledDelayMillis: 200 }),
    ],
  });
  if (mode !== 'off') {
    trace.setGlobalTracerProvider(provider);
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    // A traced app's instrumentations enter contexts all the time, which turns on the context
    // manager's async hooks for every promise in the process; without this one call, -sdk would
    // never pay that cost and -on would pay it alone.
    context.with(context.active(), () => undefined);
  }

  const app = await NestFactory.createApplicationContext(
    O11yBenchModule.forRoot(storeOptions, on ? onOptions(registry) : {}),
    { logger: ['error', 'warn'] },
  );
  await app.init();
  try {
    const outbox = app.get(OutboxService);
    const dispatcher = app.get(OutboxDispatcher);
    let handled = 0;
    let t1 = 0;
    sink.onEvent = () => {
      if (++handled === N) t1 = now();
    };
    for (let i = 0; i < N; i += 500) {
      // BENCH_O11Y_HEADERS=1 without the outbox's tracing: the events still carry a
      // traceparent, as the outbox's tracing would write (for finding what the header costs).
      const headers =
        process.env.BENCH_O11Y_HEADERS === '1' && !(on && onOptions(registry).tracing)
          ? {
              traceparent: `00-${randomBytes(16).toString('hex')}-${randomBytes(8).toString('hex')}-${Math.random() < SAMPLE ? '01' : '00'}`,
            }
          : undefined;
      const chunk = Array.from({ length: Math.min(500, N - i) }, (_, j) => ({
        type: EVENT_TYPE,
        payload: { orderId: i + j, lines: [{ sku: 'A-1', qty: 1 }] },
        ...(headers ? { headers } : {}),
      }));
      await outbox.append(chunk);
    }
    const t0 = now();
    const cpu0 = process.cpuUsage();
    dispatcher.start();
    await waitFor(() => handled, N, TIMEOUT_MS, variant);
    const cpu = process.cpuUsage(cpu0);
    await app.close();
    const stats = dispatcher.stats();
    if (handled !== N || stats.succeeded !== N) {
      throw new Error(`${variant}: handled ${handled}, acked ${stats.succeeded}, expected ${N}`);
    }
    const checks: Record<string, number> = {};
    if (on) {
      await provider.forceFlush();
      const json = await registry.getMetricsAsJSON();
      const deliveries = json.find((m) => m.name === 'outbox_deliveries_total');
      checks.countedDeliveries = (deliveries?.values ?? [])
        .filter((v) => v.labels.handler === HANDLER_NAME && v.labels.outcome === 'delivered')
        .reduce((sum, v) => sum + v.value, 0);
      checks.handlerSpans = exporter.handlerSpans;
      const parts = onOptions(registry);
      const expected = {
        countedDeliveries: parts.metrics ? N : 0,
        handlerSpans: parts.tracing ? N : 0,
      };
      // Sampled: handler spans follow their appender's decision, made once per append of 500,
      // so their number moves in steps of 500.
      const spansOk =
        SAMPLE === 1
          ? checks.handlerSpans === expected.handlerSpans
          : checks.handlerSpans % 500 === 0 && checks.handlerSpans <= expected.handlerSpans;
      if (checks.countedDeliveries !== expected.countedDeliveries || !spansOk) {
        throw new Error(`${variant}: ${JSON.stringify(checks)}, expected ${N} each`);
      }
    }
    emit({
      scenario: 'o11y',
      variant,
      round,
      eventsPerSec: N / ((t1 - t0) / 1000),
      // This process's CPU time (user + system) per delivered event, from start to the N-th
      // handler call: less sensitive than wall time to the other processes on the machine.
      cpuUsPerEvent: (cpu.user + cpu.system) / N,
      settings: {
        n: N,
        concurrency: 100,
        batchSize: 100,
        otelSdk: mode !== 'off',
        ...(SAMPLE !== 1 && mode !== 'off' ? { sampled: SAMPLE } : {}),
        metrics: on,
        tracing: on,
        handler:
          handlerWork === 'timer'
            ? `timer ${envInt('BENCH_O11Y_TIMER_MS', 1)} ms`
            : (handlerWork ?? 'no-op'),
        ...checks,
      },
    });
  } finally {
    await app.close().catch(() => undefined);
    await provider.shutdown().catch(() => undefined);
    if (ds) {
      await dropOutboxTables(ds, PREFIX);
      await ds.destroy();
    }
    if (store === 'sqlite') removeSqliteFile();
    if (store === 'redis') await deleteRedisKeys(`{${REDIS_PREFIX}}*`);
  }
}

runMain(main);
