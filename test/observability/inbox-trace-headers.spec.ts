import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host';
import { KafkaContext, MqttContext, NatsContext, RmqContext } from '@nestjs/microservices';
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { headers as natsHeaders } from 'nats';
import { messageHeaders } from '../../lib/inbox/inbox.interceptor';
import { OutboxTracing } from '../../lib/observability/outbox-tracing';

/**
 * `@Inbox()` continues the trace a message carries, whatever its transport: the headers are read
 * from the transport's own context object (real Nest context classes, real NATS headers).
 */
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

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT = '00f067aa0ba902b7';
const traceparent = `00-${TRACE}-${PARENT}-01`;

function rpc(transport: object): ExecutionContextHost {
  const host = new ExecutionContextHost([{ id: 'm-1' }, transport]);
  host.setType('rpc');
  return host;
}

const nats = natsHeaders();
nats.set('traceparent', traceparent);

describe('@Inbox() reads the trace context of each transport', () => {
  it.each([
    ['NATS headers', rpc(new NatsContext(['orders', nats]))],
    [
      'RabbitMQ properties',
      rpc(new RmqContext([{ properties: { headers: { traceparent } } }, {}, 'orders'])),
    ],
    [
      'Kafka headers (buffers)',
      rpc(
        new KafkaContext([
          { headers: { traceparent: Buffer.from(traceparent) } } as never,
          0,
          'orders',
          {} as never,
          (() => Promise.resolve()) as never,
          {} as never,
        ]),
      ),
    ],
    [
      'MQTT 5 user properties',
      rpc(new MqttContext(['orders', { properties: { userProperties: { traceparent } } }])),
    ],
  ])('%s', async (_name, host) => {
    exporter.reset();
    const tracing = OutboxTracing.load();
    const active = await tracing.continueFrom(
      messageHeaders(host),
      'orders-consumer',
      async () => trace.getActiveSpan()?.spanContext().traceId,
    );
    expect(active).toBe(TRACE);
    const [span] = exporter.getFinishedSpans();
    expect(span.name).toBe('process orders-consumer');
    expect(span.parentSpanContext?.spanId).toBe(PARENT);
  });

  it('a message without trace context runs as it is, with no span', async () => {
    exporter.reset();
    const host = rpc(new RmqContext([{ properties: { headers: {} } }, {}, 'orders']));
    const result = await OutboxTracing.load().continueFrom(messageHeaders(host), 'c', async () =>
      trace.getActiveSpan(),
    );
    expect(result).toBeUndefined();
    expect(exporter.getFinishedSpans()).toEqual([]);
  });

  it('works without a global propagator: the W3C header is read by the library', async () => {
    exporter.reset();
    propagation.disable();
    try {
      const host = rpc(new RmqContext([{ properties: { headers: { traceparent } } }, {}, 'q']));
      const active = await OutboxTracing.load().continueFrom(
        messageHeaders(host),
        'c',
        async () => trace.getActiveSpan()?.spanContext().traceId,
      );
      expect(active).toBe(TRACE);
    } finally {
      propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    }
  });
});
