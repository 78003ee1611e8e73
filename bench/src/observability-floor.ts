/*
 * What the OpenTelemetry SDK and prom-client cost per handler attempt, without the outbox
 * (issue 13's overhead floor). The same SDK setup as the `o11y` scenario (BasicTracerProvider,
 * BatchSpanProcessor into a counting exporter, AsyncLocalStorage context manager entered once,
 * W3C propagator); each step runs N times around an empty async function, 100 in flight at a
 * time as the dispatcher's concurrency 100 would, and reports this process's CPU µs per call
 * (user + system) above the bare loop.
 *   node -r ../node_modules/ts-node/register/transpile-only src/observability-floor.ts
 * BENCH_O11Y_SAMPLE=0.1 samples 10 % of the parents (parent-based), as in the scenario.
 */
import * as api from '@opentelemetry/api';
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
import { Counter, Histogram, Registry } from 'prom-client';
import { resolve } from 'node:path';

const N = Number(process.env.BENCH_FLOOR_N ?? 200_000);
const SAMPLE = Number(process.env.BENCH_O11Y_SAMPLE ?? 1);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);

class CountingExporter implements SpanExporter {
  spans = 0;
  export(spans: ReadableSpan[], done: (result: { code: number }) => void): void {
    this.spans += spans.length;
    done({ code: 0 });
  }
  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

const provider = new BasicTracerProvider({
  sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(SAMPLE) }),
  spanProcessors: [
    new BatchSpanProcessor(new CountingExporter(), {
      maxQueueSize: 8192,
      scheduledDelayMillis: 200,
    }),
  ],
});
api.trace.setGlobalTracerProvider(provider);
api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
api.propagation.setGlobalPropagator(new W3CTraceContextPropagator());
api.context.with(api.context.active(), () => undefined);
const tracer = api.trace.getTracer('floor');

/** One parent context per 500 events (an append of 500), sampled per SAMPLE. */
const parents = Array.from({ length: Math.ceil(N / 500) }, () => {
  const root = tracer.startSpan('send');
  root.end();
  return api.trace.setSpan(api.ROOT_CONTEXT, root);
});

const handler = async (_n: number): Promise<void> => undefined;
const attributes = (i: number): api.Attributes => ({
  'messaging.system': 'nestjs-outbox',
  'messaging.operation.type': 'process',
  'messaging.destination.name': 'order.placed',
  'messaging.message.id': `0193c4e8-0000-7000-8000-${String(i).padStart(12, '0')}`,
  'messaging.consumer.group.name': 'bench',
  'messaging.outbox.delivery_id': `0193c4e8-0000-7000-9000-${String(i).padStart(12, '0')}`,
  'messaging.outbox.attempt': 1,
  'messaging.outbox.worker_id': 'bench-1-abc',
});

const registry = new Registry();
const counter = new Counter({
  name: 'c',
  help: 'c',
  labelNames: ['type', 'handler', 'outcome'],
  registers: [registry],
});
const child = counter.labels({ type: 'order.placed', handler: 'bench', outcome: 'delivered' });
const histogram = new Histogram({
  name: 'h',
  help: 'h',
  labelNames: ['handler'],
  registers: [registry],
});
const hchild = histogram.labels({ handler: 'bench' });

/**
 * The outbox's own per-attempt path, from each library in BENCH_FLOOR_LIBS (directories of a
 * compiled `dist`, relative to bench/; default `../dist`): the consumer span around the handler
 * (`OutboxTracing.process` / `endProcess`, as the dispatcher calls them) and the `delivered`
 * event into `OutboxMetrics`' listeners, for N events whose headers carry a traceparent (one per
 * 500, as one append of 500 writes), every header object its own as parsed from a store row.
 */
const libs = (process.env.BENCH_FLOOR_LIBS ?? '../dist').split(',');
const events = Array.from({ length: N }, (_, i) => {
  const carrier: Record<string, string> = {};
  api.propagation.inject(parents[(i / 500) | 0], carrier);
  return {
    id: `0193c4e8-0000-7000-8000-${String(i).padStart(12, '0')}`,
    type: 'order.placed',
    key: null,
    payload: {},
    headers: JSON.parse(JSON.stringify(carrier)) as Record<string, string>,
    availableAt: new Date(Date.now() - 5),
  };
});
function outboxPath(dir: string): (i: number) => Promise<void> {
  const root = resolve(__dirname, '..', dir);
  const { OutboxTracing } = require(`${root}/observability/outbox-tracing`);
  const { OutboxEvents } = require(`${root}/observability/outbox-events`);
  const { OutboxMetrics } = require(`${root}/observability/outbox-metrics`);
  const { resolveObservabilityOptions } = require(`${root}/observability/observability-options`);
  const tracing = OutboxTracing.load();
  const stream = new OutboxEvents();
  const metrics = new OutboxMetrics(
    stream,
    {},
    {
      observability: resolveObservabilityOptions({
        metrics: { registry: new Registry(), gaugeRefreshMs: 0 },
      }),
    },
  );
  metrics.onModuleInit();
  return (i) => {
    const event = events[i];
    const context = { attempt: 1, workerId: 'bench-1-abc', deliveryId: event.id, handler: 'bench' };
    const holder: { span: unknown } = { span: null };
    const startedAt = Date.now();
    const started = performance.now();
    return tracing.process(event, context, handler, holder).then(() => {
      if (holder.span) tracing.endProcess(holder.span, false, undefined);
      if (stream.wants('delivered')) {
        stream.emit({
          kind: 'delivered',
          eventId: event.id,
          type: event.type,
          deliveryId: event.id,
          handler: 'bench',
          attempt: 1,
          workerId: 'bench-1-abc',
          startedAt,
          durationMs: performance.now() - started,
          availableAt: event.availableAt,
        });
      }
    });
  };
}

type Step = (i: number) => Promise<void>;
const allSteps: Record<string, Step> = {
  bare: (i) => handler(i),
  'bare + then (the reaction the dispatcher has anyway)': (i) => handler(i).then(() => undefined),
  'startSpan+end, no attributes': (i) => {
    const span = tracer.startSpan(
      'process order.placed',
      { kind: api.SpanKind.CONSUMER },
      parents[(i / 500) | 0],
    );
    return handler(i).then(() => span.end());
  },
  'startSpan+end, 8 attributes': (i) => {
    const span = tracer.startSpan(
      'process order.placed',
      { kind: api.SpanKind.CONSUMER, attributes: attributes(i) },
      parents[(i / 500) | 0],
    );
    return handler(i).then(() => span.end());
  },
  'context.with(parent)': (i) => api.context.with(parents[(i / 500) | 0], handler, undefined, i),
  'setSpan + context.with': (i) => {
    const parent = parents[(i / 500) | 0];
    const span = tracer.startSpan('process order.placed', { kind: api.SpanKind.CONSUMER }, parent);
    return api.context
      .with(api.trace.setSpan(parent, span), handler, undefined, i)
      .then(() => span.end());
  },
  'all: span, 8 attributes, setSpan, with': (i) => {
    const parent = parents[(i / 500) | 0];
    const span = tracer.startSpan(
      'process order.placed',
      { kind: api.SpanKind.CONSUMER, attributes: attributes(i) },
      parent,
    );
    return api.context
      .with(api.trace.setSpan(parent, span), handler, undefined, i)
      .then(() => span.end());
  },
  'prom-client: counter child inc + 2 histogram child observe': (i) => {
    child.inc();
    hchild.observe(0.0001);
    hchild.observe(0.002);
    return handler(i);
  },
};

for (const dir of libs) allSteps[`outbox path: ${dir}`] = outboxPath(dir);

/** BENCH_FLOOR_STEPS=bare,context picks steps whose names contain one of the words. */
const only = process.env.BENCH_FLOOR_STEPS?.split(',');
const steps = Object.fromEntries(
  Object.entries(allSteps).filter(
    ([name]) => name === 'bare' || !only || only.some((w) => name.includes(w)),
  ),
);

async function measure(step: Step): Promise<number> {
  const cpu0 = process.cpuUsage();
  let next = 0;
  const lane = async () => {
    while (next < N) await step(next++);
  };
  await Promise.all(Array.from({ length: 100 }, lane));
  const cpu = process.cpuUsage(cpu0);
  return (cpu.user + cpu.system) / N;
}

async function main(): Promise<void> {
  const results: Record<string, number[]> = {};
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, step] of Object.entries(steps)) {
      (results[name] ??= []).push(await measure(step));
      await provider.forceFlush();
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  const bare = median(results.bare);
  for (const [name, xs] of Object.entries(results)) {
    const m = median(xs);
    console.log(
      `${name.padEnd(58)} ${m.toFixed(2).padStart(6)} µs/call  (+${(m - bare).toFixed(2)} over bare)`,
    );
  }
  await provider.shutdown();
}

void main();
