import { Body, Controller, INestApplication, Injectable, Post } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { context, propagation, SpanKind, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  AlwaysOffSampler,
  BasicTracerProvider,
  InMemorySpanExporter,
  ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import request from 'supertest';
import { DataSource } from 'typeorm';
import {
  DuplicateEventError,
  Inbox,
  NonRetryableError,
  OutboxDispatcher,
  OutboxHandler,
  OutboxModule,
  OutboxModuleOptions,
  OutboxService,
  OUTBOX_STORE,
  OutboxStore,
} from 'nestjs-outbox';

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const tracer = provider.getTracer('test');

beforeAll(() => {
  trace.setGlobalTracerProvider(provider);
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
});
afterAll(async () => {
  await provider.shutdown();
  trace.disable();
  context.disable();
  propagation.disable();
});

const traceOf = (span: ReadableSpan) => span.spanContext().traceId;
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId;

/** What each handler attempt saw as its active trace. */
const seen: { attempt: number; traceId: string | undefined }[] = [];
/** The `traceparent` each handler attempt's outgoing calls would send. */
const sent: (string | undefined)[] = [];
let failures: (Error | null)[] = [];

@Injectable()
class Shipping {
  @OutboxHandler('order.placed', { name: 'shipping' })
  ship(_event: unknown, ctx: { attempt: number }) {
    seen.push({ attempt: ctx.attempt, traceId: trace.getActiveSpan()?.spanContext().traceId });
    const carrier: Record<string, string> = {};
    propagation.inject(context.active(), carrier);
    sent.push(carrier.traceparent);
    const failure = failures.shift();
    if (failure) throw failure;
  }
}

@Controller('payments')
class Payments {
  readonly traces: (string | undefined)[] = [];
  @Post()
  @Inbox()
  pay(@Body() _body: unknown) {
    this.traces.push(trace.getActiveSpan()?.spanContext().traceId);
    return { ok: true };
  }
}

describe('OpenTelemetry tracing', () => {
  let app: INestApplication | undefined;
  let dataSource: DataSource | undefined;

  beforeEach(() => {
    exporter.reset();
    seen.length = 0;
    sent.length = 0;
    failures = [];
  });
  afterEach(async () => {
    await app?.close();
    await dataSource?.destroy();
    app = dataSource = undefined;
  });

  /** A real SQLite outbox: the trace context goes through the events table and back. */
  async function start(module: Partial<OutboxModuleOptions> = { tracing: true }) {
    dataSource = await new DataSource({
      type: 'better-sqlite3',
      database: ':memory:',
    }).initialize();
    const moduleRef = await Test.createTestingModule({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: { type: 'typeorm', dataSource, ensureSchema: true },
          dispatcher: { enabled: false, backoff: { initialMs: 20, jitter: 0 } },
          inbox: { dataSource },
          ...module,
        }),
      ],
      controllers: [Payments],
      providers: [Shipping],
    }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    return {
      outbox: app.get(OutboxService),
      dispatcher: app.get(OutboxDispatcher),
      store: app.get<OutboxStore>(OUTBOX_STORE),
    };
  }

  /** Drains until `attempts` handler runs happened (retries wait for their short backoff). */
  async function runUntil(dispatcher: OutboxDispatcher, attempts: number) {
    for (let i = 0; i < 100 && seen.length < attempts; i++) {
      await dispatcher.drain();
      if (seen.length < attempts) await new Promise((r) => setTimeout(r, 25));
    }
  }

  it("the handler span carries the appender's trace, on the first attempt and on a retry after replay", async () => {
    const { outbox, dispatcher, store } = await start();
    failures = [new NonRetryableError('out of stock'), new Error('carrier down'), null];

    // The append happens inside the app's own span (an HTTP request, a job…).
    const event = await tracer.startActiveSpan('checkout', async (span) => {
      try {
        return await outbox.append({ type: 'order.placed', payload: { sku: 'A1' } });
      } finally {
        span.end();
      }
    });
    const checkout = exporter.getFinishedSpans().find((s) => s.name === 'checkout')!;
    const producer = exporter.getFinishedSpans().find((s) => s.name === 'send order.placed')!;
    expect(producer.kind).toBe(SpanKind.PRODUCER);
    expect(traceOf(producer)).toBe(traceOf(checkout));
    expect(parentOf(producer)).toBe(checkout.spanContext().spanId);
    // The event's stored headers carry the producer span's W3C context.
    expect(event.headers.traceparent).toBe(
      `00-${traceOf(checkout)}-${producer.spanContext().spanId}-01`,
    );

    // Attempt 1: rejected, dead-lettered.
    await runUntil(dispatcher, 1);
    const [dead] = (await store.listDeadLetters({ limit: 10 })).items;
    expect(dead.headers.traceparent).toBe(event.headers.traceparent);
    // Replayed: attempt 1 again fails and is retried; attempt 2 succeeds.
    await store.replay({ ids: [dead.id] });
    await runUntil(dispatcher, 3);

    expect(seen).toEqual([
      { attempt: 1, traceId: traceOf(checkout) },
      { attempt: 1, traceId: traceOf(checkout) },
      { attempt: 2, traceId: traceOf(checkout) },
    ]);
    const consumers = exporter.getFinishedSpans().filter((s) => s.name === 'process order.placed');
    expect(consumers).toHaveLength(3);
    for (const span of consumers) {
      expect(span.kind).toBe(SpanKind.CONSUMER);
      expect(traceOf(span)).toBe(traceOf(checkout));
      expect(parentOf(span)).toBe(producer.spanContext().spanId);
      expect(span.attributes).toMatchObject({
        'messaging.system': 'nestjs-outbox',
        'messaging.operation.type': 'process',
        'messaging.destination.name': 'order.placed',
        'messaging.message.id': event.id,
        'messaging.consumer.group.name': 'shipping',
      });
    }
    expect(consumers.map((s) => [s.attributes['messaging.outbox.attempt'], s.status.code])).toEqual(
      [
        [1, 2],
        [1, 2],
        [2, 0],
      ],
    );
  });

  it('an append outside any span starts a trace its handler continues; a traceparent the app set is kept', async () => {
    const { outbox, dispatcher } = await start();
    const own = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const [fresh, given] = await outbox.append([
      { type: 'order.placed', payload: {} },
      { type: 'order.placed', payload: {}, headers: { traceparent: own, tenant: 't1' } },
    ]);
    expect(fresh.headers.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    expect(given.headers).toEqual({ traceparent: own, tenant: 't1' });
    await runUntil(dispatcher, 2);
    expect(seen.map((s) => s.traceId).sort()).toEqual(
      [fresh.headers.traceparent.split('-')[1], '0af7651916cd43dd8448eb211c80319c'].sort(),
    );
  });

  it('trace headers neither break an idempotent re-append nor count against the header limits', async () => {
    const { outbox } = await start();
    const id = '6f1f7d0e-8a55-4e65-9d49-3a7f3f0d2c11';
    const inSpan = (name: string) =>
      tracer.startActiveSpan(name, async (span) => {
        try {
          return await outbox.append({ id, type: 'order.placed', payload: { sku: 'A1' } });
        } finally {
          span.end();
        }
      });
    const first = await inSpan('checkout');
    // The caller retries in another request: same id, same content, another trace.
    const again = await inSpan('checkout retried');
    expect(again.id).toBe(id);
    await expect(
      outbox.append({ id, type: 'order.placed', payload: { sku: 'B2' } }),
    ).rejects.toBeInstanceOf(DuplicateEventError);
    expect(first.headers.traceparent).toMatch(/^00-/);

    // 64 headers of the app's own (the limit) still fit: the trace context is added after them.
    const headers = Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`h${i}`, 'v']));
    const full = await outbox.append({ type: 'order.placed', payload: {}, headers });
    expect(Object.keys(full.headers)).toHaveLength(65);
    expect(full.headers.traceparent).toMatch(/^00-/);
  });

  it('@Inbox() consumers continue the trace of the traceparent their message carries', async () => {
    await start();
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    await request(app!.getHttpServer())
      .post('/payments')
      .set('Idempotency-Key', 'pay-1')
      .set('traceparent', `00-${traceId}-00f067aa0ba902b7-01`)
      .send({ amount: 5 })
      .expect(201);
    expect(app!.get(Payments).traces).toEqual([traceId]);
    const span = exporter.getFinishedSpans().find((s) => s.name === 'process Payments.pay')!;
    expect(span.kind).toBe(SpanKind.CONSUMER);
    expect(traceOf(span)).toBe(traceId);
    expect(parentOf(span)).toBe('00f067aa0ba902b7');
  });

  it("a trace the appender did not sample gets no handler span, and the handler's calls still carry it, unsampled", async () => {
    const { outbox, dispatcher } = await start();
    const unsampled = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00';
    const sampled = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    await outbox.append([
      { type: 'order.placed', payload: {}, headers: { traceparent: unsampled } },
      { type: 'order.placed', payload: {}, headers: { traceparent: unsampled } },
      { type: 'order.placed', payload: {}, headers: { traceparent: sampled } },
    ]);
    await runUntil(dispatcher, 3);
    const consumers = exporter.getFinishedSpans().filter((s) => s.name === 'process order.placed');
    expect(consumers.map(traceOf)).toEqual(['4bf92f3577b34da6a3ce929d0e0e4736']);
    // Trace id and sampled flag of what the handlers' own calls send.
    expect(sent.map((h) => [h?.split('-')[1], h?.split('-')[3]]).sort()).toEqual([
      ['0af7651916cd43dd8448eb211c80319c', '00'],
      ['0af7651916cd43dd8448eb211c80319c', '00'],
      ['4bf92f3577b34da6a3ce929d0e0e4736', '01'],
    ]);
    expect(seen.map((s) => s.traceId).sort()).toEqual([
      '0af7651916cd43dd8448eb211c80319c',
      '0af7651916cd43dd8448eb211c80319c',
      '4bf92f3577b34da6a3ce929d0e0e4736',
    ]);
  });

  it("a handler span the app's sampler drops under a sampled parent propagates the sampler's decision", async () => {
    trace.disable();
    trace.setGlobalTracerProvider(new BasicTracerProvider({ sampler: new AlwaysOffSampler() }));
    try {
      const { outbox, dispatcher } = await start();
      const parent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
      await outbox.append({ type: 'order.placed', payload: {}, headers: { traceparent: parent } });
      await runUntil(dispatcher, 1);
      // The SDK's own non-recording span: same trace, its sampled flag off, a span id of its own.
      expect(sent).toEqual([
        expect.stringMatching(/^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-00$/),
      ]);
      expect(sent[0]).not.toContain('00f067aa0ba902b7');
    } finally {
      trace.disable();
      trace.setGlobalTracerProvider(provider);
    }
  });

  it('without a global propagator the library writes the W3C headers itself', async () => {
    const { outbox } = await start();
    propagation.disable();
    try {
      const event = await tracer.startActiveSpan('job', async (span) => {
        try {
          return await outbox.append({ type: 'order.placed', payload: {} });
        } finally {
          span.end();
        }
      });
      const job = exporter.getFinishedSpans().find((s) => s.name === 'job')!;
      expect(event.headers.traceparent).toMatch(new RegExp(`^00-${traceOf(job)}-[0-9a-f]{16}-01$`));
    } finally {
      propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    }
  });

  it('off by default: no headers written, no spans', async () => {
    const { outbox, dispatcher } = await start({});
    const event = await tracer.startActiveSpan('checkout', async (span) => {
      try {
        return await outbox.append({ type: 'order.placed', payload: {} });
      } finally {
        span.end();
      }
    });
    expect(event.headers).toEqual({});
    await runUntil(dispatcher, 1);
    expect(exporter.getFinishedSpans().map((s) => s.name)).toEqual(['checkout']);
  });
});
