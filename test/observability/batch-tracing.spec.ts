import { Injectable } from '@nestjs/common';
import { context, propagation, SpanKind, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { OutboxEvent, OutboxHandler } from 'nestjs-outbox';
import { createOutboxApp, TestApp } from '../support/outbox-app';

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });

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

describe('OpenTelemetry: a batch handler call', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.app.close();
  });

  it('runs in one CONSUMER span linked to each event’s producer span', async () => {
    const active: (string | undefined)[] = [];
    @Injectable()
    class Metrics {
      @OutboxHandler('m.metric', { name: 'metrics', batch: { max: 10 } })
      write(_events: OutboxEvent[]) {
        active.push(trace.getActiveSpan()?.spanContext().spanId);
      }
    }
    t = await createOutboxApp([Metrics], {
      dispatcher: { enabled: false },
      module: { tracing: true },
    });
    for (let n = 0; n < 3; n++) await t.outbox.append({ type: 'm.metric', payload: { n } });
    await t.dispatcher.drain();
    const spans = exporter.getFinishedSpans();
    const producers = spans.filter((s) => s.kind === SpanKind.PRODUCER);
    const consumers = spans.filter((s) => s.kind === SpanKind.CONSUMER);
    expect(producers).toHaveLength(3);
    expect(consumers).toHaveLength(1);
    const [batch] = consumers;
    expect(batch.name).toBe('process m.metric');
    expect(batch.attributes).toMatchObject({
      'messaging.operation.type': 'process',
      'messaging.destination.name': 'm.metric',
      'messaging.consumer.group.name': 'metrics',
      'messaging.batch.message_count': 3,
    });
    expect(batch.links.map((l) => l.context.spanId).sort()).toEqual(
      producers.map((p) => p.spanContext().spanId).sort(),
    );
    expect(active).toEqual([batch.spanContext().spanId]);
  });
});
