import type * as Otel from '@opentelemetry/api';
import type { OutboxEvent, OutboxHeaders } from '../interfaces/outbox-event.interface';
import type { OutboxHandlerContext } from '../interfaces/outbox-handler.interface';
import { assertInstalled } from '../optional-peers';

type OtelApi = typeof Otel;
/** A header carrier: a plain map, or an object with `get(name)` (NATS headers). */
type Carrier = Record<string, unknown> | { get(name: string): unknown };

/** Attribute values of the OpenTelemetry messaging semantic conventions. */
const SYSTEM = 'nestjs-outbox';
const TRACEPARENT = 'traceparent';
const TRACESTATE = 'tracestate';
const TRACEPARENT_FORMAT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** Most span names kept (one per event type; types come from code, so this is a safety bound). */
const MAX_CACHED_NAMES = 1000;

/**
 * OpenTelemetry through `@opentelemetry/api` (README "Monitoring"): producer spans around
 * `append` whose context is written into each event's headers as W3C `traceparent` /
 * `tracestate`, and consumer spans, children of that context, around every handler attempt — so
 * retries and replays (the headers are stored with the event) stay in the appender's trace. The
 * global propagator is used when the app configured one; otherwise the W3C headers are written
 * and read here, so the context survives either way.
 */
export class OutboxTracing {
  private readonly tracer: Otel.Tracer;
  /** Consumer span names by event type (bounded: types come from code). */
  private readonly spanNames = new Map<string, string>();
  /** The parent context last read from W3C-only headers, and the header values it came from. */
  private lastParent: { traceparent: string; tracestate: unknown; context: Otel.Context } | null =
    null;

  private constructor(private readonly api: OtelApi) {
    this.tracer = api.trace.getTracer(SYSTEM);
  }

  /** Loads `@opentelemetry/api`, or fails naming the package and its install command. */
  static load(): OutboxTracing {
    assertInstalled('Outbox tracing (the tracing option)', ['@opentelemetry/api']);
    return new OutboxTracing(require('@opentelemetry/api') as OtelApi);
  }

  /**
   * Runs an append in a PRODUCER span; `stamp` gives an event's headers the span's context (an
   * event that already carries a `traceparent` keeps it).
   */
  async send<T>(
    types: string[],
    append: (stamp: (headers: OutboxHeaders | undefined) => OutboxHeaders) => Promise<T>,
  ): Promise<T> {
    const { api } = this;
    const single = types.every((t) => t === types[0]);
    const span = this.tracer.startSpan(single ? `send ${types[0]}` : 'send', {
      kind: api.SpanKind.PRODUCER,
      attributes: {
        'messaging.system': SYSTEM,
        'messaging.operation.type': 'send',
        'messaging.operation.name': 'append',
        ...(single ? { 'messaging.destination.name': types[0] } : {}),
        ...(types.length > 1 ? { 'messaging.batch.message_count': types.length } : {}),
      },
    });
    const ctx = api.trace.setSpan(api.context.active(), span);
    const stamp = (headers: OutboxHeaders | undefined): OutboxHeaders => {
      const carrier: OutboxHeaders = { ...headers };
      if (carrier[TRACEPARENT] !== undefined) return carrier;
      api.propagation.inject(ctx, carrier);
      if (carrier[TRACEPARENT] === undefined) writeW3c(span.spanContext(), carrier);
      return carrier;
    };
    try {
      return await api.context.with(ctx, () => append(stamp));
    } catch (error) {
      this.fail(span, error);
      throw error;
    } finally {
      span.end();
    }
  }

  /**
   * Runs one handler attempt, `invoke(event, context)`, in a CONSUMER span, child of the context
   * stored in the event's headers (or a new trace when it has none), and puts the span in
   * `holder.span`. The caller ends it with `endProcess` once the returned promise settles (its
   * own reaction to the handler, so tracing adds no promise of its own per attempt). Per attempt
   * this allocates the span, its attributes and the active context; the parent context is read
   * once per distinct `traceparent` (the events of one append share it), span names once per type.
   */
  process<T>(
    event: OutboxEvent,
    context: OutboxHandlerContext,
    invoke: (event: OutboxEvent, context: OutboxHandlerContext) => Promise<T>,
    holder: { span: unknown },
  ): Promise<T> {
    const { api } = this;
    const attributes: Otel.Attributes = {
      'messaging.system': SYSTEM,
      'messaging.operation.type': 'process',
      'messaging.destination.name': event.type,
      'messaging.message.id': event.id,
      'messaging.consumer.group.name': context.handler,
      'messaging.outbox.delivery_id': context.deliveryId,
      'messaging.outbox.attempt': context.attempt,
      'messaging.outbox.worker_id': context.workerId,
    };
    if (event.key !== null) attributes['messaging.outbox.key'] = event.key;
    let name = this.spanNames.get(event.type);
    if (name === undefined) {
      name = `process ${event.type}`;
      if (this.spanNames.size < MAX_CACHED_NAMES) this.spanNames.set(event.type, name);
    }
    const parent = this.parentOf(event.headers);
    const span = this.tracer.startSpan(name, { kind: api.SpanKind.CONSUMER, attributes }, parent);
    holder.span = span;
    try {
      return api.context.with(api.trace.setSpan(parent, span), invoke, undefined, event, context);
    } catch (error) {
      holder.span = null;
      this.fail(span, error);
      span.end();
      throw error;
    }
  }

  /** Ends a span `process` started: status ERROR when its attempt failed. */
  endProcess(span: unknown, failed: boolean, error: unknown): void {
    if (!span) return;
    if (failed) this.fail(span as Otel.Span, error);
    (span as Otel.Span).end();
  }

  /**
   * The context stored in an event's headers. Headers with nothing but the W3C fields (what
   * `send` writes) are extracted once per distinct value: a context is immutable, so the events
   * of one append share theirs. No headers: a new trace, nothing to extract.
   */
  private parentOf(headers: OutboxHeaders): Otel.Context {
    const { api } = this;
    let traceparent: unknown;
    let tracestate: unknown;
    let others = false;
    if (!headers) return api.ROOT_CONTEXT;
    for (const name in headers) {
      if (name === TRACEPARENT) traceparent = headers[name];
      else if (name === TRACESTATE) tracestate = headers[name];
      else others = true;
    }
    if (!others && traceparent === undefined && tracestate === undefined) return api.ROOT_CONTEXT;
    if (
      others ||
      typeof traceparent !== 'string' ||
      (tracestate !== undefined && typeof tracestate !== 'string')
    ) {
      return this.extract(headers, api.ROOT_CONTEXT);
    }
    const cached = this.lastParent;
    if (cached && cached.traceparent === traceparent && cached.tracestate === tracestate) {
      return cached.context;
    }
    const context = this.extract(headers, api.ROOT_CONTEXT);
    this.lastParent = { traceparent, tracestate, context };
    return context;
  }

  /**
   * `@Inbox()`: continues the trace carried by a message's headers. Nothing to do when the
   * headers carry none, or when the active span already belongs to that trace (HTTP or outbox
   * handler spans). Under an active span of another trace, the new span is its child and links
   * to the message's context.
   */
  continueFrom<T>(
    headers: object | undefined,
    consumer: string,
    run: () => Promise<T>,
  ): Promise<T> {
    if (!headers || typeof headers !== 'object') return run();
    const { api } = this;
    const extracted = this.extract(headers as Carrier, api.ROOT_CONTEXT);
    const remote = api.trace.getSpanContext(extracted);
    if (!remote || !api.isSpanContextValid(remote)) return run();
    const active = api.trace.getSpanContext(api.context.active());
    if (active && api.isSpanContextValid(active)) {
      if (active.traceId === remote.traceId) return run();
      return this.inSpan(
        `process ${consumer}`,
        api.context.active(),
        { 'messaging.operation.type': 'process', 'messaging.consumer.group.name': consumer },
        [{ context: remote }],
        run,
      );
    }
    return this.inSpan(
      `process ${consumer}`,
      extracted,
      { 'messaging.operation.type': 'process', 'messaging.consumer.group.name': consumer },
      [],
      run,
    );
  }

  /** Runs `run` in a CONSUMER span. */
  private inSpan<T>(
    name: string,
    parent: Otel.Context,
    attributes: Otel.Attributes,
    links: Otel.Link[],
    run: () => Promise<T>,
  ): Promise<T> {
    const { api } = this;
    const span = this.tracer.startSpan(
      name,
      { kind: api.SpanKind.CONSUMER, attributes, links },
      parent,
    );
    return this.run(span, parent, run);
  }

  /**
   * Runs `fn(...args)` with `span` active (a `.then` chain: one promise fewer per handler run)
   * and ends the span when it settles.
   */
  private run<A extends unknown[], T>(
    span: Otel.Span,
    parent: Otel.Context,
    fn: (...args: A) => Promise<T>,
    ...args: A
  ): Promise<T> {
    const { api } = this;
    let running: Promise<T>;
    try {
      running = api.context.with(api.trace.setSpan(parent, span), fn, undefined, ...args);
    } catch (error) {
      this.fail(span, error);
      span.end();
      throw error;
    }
    return running.then(
      (value) => {
        span.end();
        return value;
      },
      (error: unknown) => {
        this.fail(span, error);
        span.end();
        throw error;
      },
    );
  }

  private fail(span: Otel.Span, error: unknown): void {
    if (error instanceof Error) span.recordException(error);
    span.setStatus({
      code: this.api.SpanStatusCode.ERROR,
      message: error instanceof Error ? error.message : String(error),
    });
  }

  private extract(carrier: Carrier, base: Otel.Context): Otel.Context {
    const { api } = this;
    const extracted = api.propagation.extract(base, carrier, getter);
    if (api.trace.getSpanContext(extracted)) return extracted;
    const remote = readW3c(getter.get(carrier, TRACEPARENT), getter.get(carrier, TRACESTATE), api);
    return remote ? api.trace.setSpanContext(base, remote) : extracted;
  }
}

/** Reads plain maps, Node's lower-cased HTTP headers, NATS headers and Kafka's buffers. */
const getter: Otel.TextMapGetter<Carrier> = {
  keys(carrier) {
    const withKeys = carrier as { keys?: () => Iterable<string> };
    if (typeof withKeys.keys === 'function') return [...withKeys.keys()];
    return Object.keys(carrier);
  },
  get(carrier, key) {
    let value: unknown =
      typeof (carrier as { get?: unknown }).get === 'function'
        ? (carrier as { get(name: string): unknown }).get(key)
        : ((carrier as Record<string, unknown>)[key] ??
          (carrier as Record<string, unknown>)[key.toLowerCase()]);
    if (Array.isArray(value)) value = value[0];
    if (Buffer.isBuffer(value)) value = value.toString('utf8');
    return typeof value === 'string' && value !== '' ? value : undefined;
  },
};

function writeW3c(spanContext: Otel.SpanContext, carrier: OutboxHeaders): void {
  const flags = (spanContext.traceFlags & 0xff).toString(16).padStart(2, '0');
  carrier[TRACEPARENT] = `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`;
  const state = spanContext.traceState?.serialize();
  if (state) carrier[TRACESTATE] = state;
}

function readW3c(
  traceparent: string | string[] | undefined,
  tracestate: string | string[] | undefined,
  api: OtelApi,
): Otel.SpanContext | null {
  const match = typeof traceparent === 'string' ? TRACEPARENT_FORMAT.exec(traceparent) : null;
  if (!match) return null;
  const spanContext: Otel.SpanContext = {
    traceId: match[1],
    spanId: match[2],
    traceFlags: parseInt(match[3], 16) & 1,
    isRemote: true,
  };
  if (typeof tracestate === 'string' && tracestate !== '') {
    spanContext.traceState = api.createTraceState(tracestate);
  }
  return api.isSpanContextValid(spanContext) ? spanContext : null;
}
