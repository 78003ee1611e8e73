import type * as Otel from '@opentelemetry/api';
import type { OutboxEvent, OutboxHeaders } from '../interfaces/outbox-event.interface';
import type {
  OutboxBatchContext,
  OutboxHandlerContext,
} from '../interfaces/outbox-handler.interface';
import { assertInstalled } from '../optional-peers';

type OtelApi = typeof Otel;
/** A header carrier: a plain map, or an object with `get(name)` (NATS headers). */
type Carrier = Record<string, unknown> | { get(name: string): unknown };

/** Attribute values of the OpenTelemetry messaging semantic conventions. */
const SYSTEM = 'nestjs-outbox';
const TRACEPARENT = 'traceparent';
const TRACESTATE = 'tracestate';
const TRACEPARENT_FORMAT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/**
 * Most span names and start attributes kept (one per event type, and per type and handler;
 * types and handlers come from code, so this is a safety bound).
 */
const MAX_CACHED = 1000;

/** Most links a batch's span carries to the traces of its events. */
const MAX_BATCH_LINKS = 128;

/** The context a consumer span continues, as read from an event's headers. */
interface Parent {
  readonly context: Otel.Context;
  /** The span context in `context` (undefined: a new trace). */
  readonly spanContext: Otel.SpanContext | undefined;
  /** `context` with that span context as a local, non-recording span: made on first use. */
  unrecorded?: Otel.Context;
}

/** Per event type: the consumer span's name, and its start attributes by handler. */
interface TypeNames {
  readonly name: string;
  readonly attributes: Map<string, Otel.Attributes>;
}

/**
 * OpenTelemetry through `@opentelemetry/api` (docs/monitoring.md): producer spans around
 * `append` whose context is written into each event's headers as W3C `traceparent` /
 * `tracestate`, and consumer spans, children of that context, around every handler attempt — so
 * retries and replays (the headers are stored with the event) stay in the appender's trace. The
 * global propagator is used when the app configured one; otherwise the W3C headers are written
 * and read here, so the context survives either way.
 */
export class OutboxTracing {
  private readonly tracer: Otel.Tracer;
  /** Consumer span names and start attributes by event type (bounded: types come from code). */
  private readonly types = new Map<string, TypeNames>();
  /** The parent last read from W3C-only headers, and the header values it came from. */
  private lastParent: { traceparent: string; tracestate: unknown; parent: Parent } | null = null;
  /** Events without trace headers start a new trace. */
  private readonly root: Parent;

  private constructor(private readonly api: OtelApi) {
    this.tracer = api.trace.getTracer(SYSTEM);
    this.root = { context: api.ROOT_CONTEXT, spanContext: undefined };
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
   * stored in the event's headers (or a new trace when it has none). A recording span is put in
   * `holder.span`; the caller ends it with `endProcess` once the returned promise settles (its
   * own reaction to the handler, so tracing adds no promise of its own per attempt).
   *
   * The span starts with the attributes samplers may decide on (the same object for every
   * attempt of a type and handler); the per-attempt ones are added only when the SDK records it.
   * A span the SDK does not record (sampled out) needs no end; when it only repeats its parent's
   * trace id, flags and state, the handler runs in a context made once per parent that holds the
   * parent's span context as a local, non-recording span: the handler's outgoing calls
   * propagate the same trace and sampled flag, without a context built per attempt.
   */
  process<T>(
    event: OutboxEvent,
    context: OutboxHandlerContext,
    invoke: (event: OutboxEvent, context: OutboxHandlerContext) => Promise<T>,
    holder: { span: unknown },
  ): Promise<T> {
    const { api } = this;
    const parent = this.parentOf(event.headers);
    const names = this.namesOf(event.type);
    let attributes = names.attributes.get(context.handler);
    if (attributes === undefined) {
      attributes = {
        'messaging.system': SYSTEM,
        'messaging.operation.type': 'process',
        'messaging.destination.name': event.type,
        'messaging.consumer.group.name': context.handler,
      };
      if (names.attributes.size < MAX_CACHED) names.attributes.set(context.handler, attributes);
    }
    const span = this.tracer.startSpan(
      names.name,
      { kind: api.SpanKind.CONSUMER, attributes },
      parent.context,
    );
    let active: Otel.Context;
    if (span.isRecording()) {
      span.setAttribute('messaging.message.id', event.id);
      span.setAttribute('messaging.outbox.delivery_id', context.deliveryId);
      span.setAttribute('messaging.outbox.attempt', context.attempt);
      span.setAttribute('messaging.outbox.worker_id', context.workerId);
      if (event.key !== null) span.setAttribute('messaging.outbox.key', event.key);
      holder.span = span;
      active = api.trace.setSpan(parent.context, span);
    } else {
      active =
        this.unrecorded(parent, span.spanContext()) ?? api.trace.setSpan(parent.context, span);
    }
    try {
      return api.context.with(active, invoke, undefined, event, context);
    } catch (error) {
      if (holder.span) {
        holder.span = null;
        this.fail(span, error);
        span.end();
      }
      throw error;
    }
  }

  /**
   * Runs one batch handler call, `invoke(events, context)`, in a CONSUMER span of its own trace
   * that links to the context stored in each event's headers (the messaging conventions' batch
   * receive: one process span, a link per message, up to 128). A recording span is put in
   * `holder.span` for the caller to end with `endProcess`, as `process` does.
   */
  processBatch<T>(
    events: OutboxEvent[],
    context: OutboxBatchContext,
    invoke: (events: OutboxEvent[], context: OutboxBatchContext) => Promise<T>,
    holder: { span: unknown },
  ): Promise<T> {
    const { api } = this;
    const type = events.every((e) => e.type === events[0].type) ? events[0].type : undefined;
    const links: Otel.Link[] = [];
    for (const event of events) {
      if (links.length >= MAX_BATCH_LINKS) break;
      const spanContext = this.parentOf(event.headers).spanContext;
      if (spanContext) links.push({ context: spanContext });
    }
    const span = this.tracer.startSpan(
      type === undefined ? 'process' : this.namesOf(type).name,
      {
        kind: api.SpanKind.CONSUMER,
        links,
        attributes: {
          'messaging.system': SYSTEM,
          'messaging.operation.type': 'process',
          ...(type === undefined ? {} : { 'messaging.destination.name': type }),
          'messaging.consumer.group.name': context.handler,
          'messaging.batch.message_count': events.length,
          'messaging.outbox.worker_id': context.workerId,
        },
      },
      api.ROOT_CONTEXT,
    );
    if (span.isRecording()) holder.span = span;
    try {
      return api.context.with(
        api.trace.setSpan(api.ROOT_CONTEXT, span),
        invoke,
        undefined,
        events,
        context,
      );
    } catch (error) {
      if (holder.span) holder.span = null;
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

  /** The consumer span's name and start attributes of an event type. */
  private namesOf(type: string): TypeNames {
    let names = this.types.get(type);
    if (names === undefined) {
      names = { name: `process ${type}`, attributes: new Map() };
      if (this.types.size < MAX_CACHED) this.types.set(type, names);
    }
    return names;
  }

  /**
   * The context a span the SDK did not record can run its handler in without a context of its
   * own: `parent`'s, when the span repeats its trace id, flags and state (so what the handler
   * propagates is the same but for the span id, its parent's instead of one nobody recorded).
   * Null when the sampler set other flags or state, or there is no parent span.
   */
  private unrecorded(parent: Parent, span: Otel.SpanContext): Otel.Context | null {
    const from = parent.spanContext;
    if (
      from === undefined ||
      span.traceId !== from.traceId ||
      span.traceFlags !== from.traceFlags ||
      span.traceState !== from.traceState
    ) {
      return null;
    }
    const { api } = this;
    parent.unrecorded ??= api.trace.setSpan(
      parent.context,
      api.trace.wrapSpanContext({
        traceId: from.traceId,
        spanId: from.spanId,
        traceFlags: from.traceFlags,
        ...(from.traceState ? { traceState: from.traceState } : {}),
      }),
    );
    return parent.unrecorded;
  }

  /**
   * The context stored in an event's headers. Headers with nothing but the W3C fields (what
   * `send` writes) are extracted once per distinct value: a context is immutable, so the events
   * of one append share theirs. No headers: a new trace, nothing to extract.
   */
  private parentOf(headers: OutboxHeaders): Parent {
    let traceparent: unknown;
    let tracestate: unknown;
    let others = false;
    if (!headers) return this.root;
    for (const name in headers) {
      if (name === TRACEPARENT) traceparent = headers[name];
      else if (name === TRACESTATE) tracestate = headers[name];
      else others = true;
    }
    if (!others && traceparent === undefined && tracestate === undefined) return this.root;
    if (
      others ||
      typeof traceparent !== 'string' ||
      (tracestate !== undefined && typeof tracestate !== 'string')
    ) {
      return this.parent(headers);
    }
    const cached = this.lastParent;
    if (cached && cached.traceparent === traceparent && cached.tracestate === tracestate) {
      return cached.parent;
    }
    const parent = this.parent(headers);
    this.lastParent = { traceparent, tracestate, parent };
    return parent;
  }

  private parent(headers: OutboxHeaders): Parent {
    const context = this.extract(headers, this.api.ROOT_CONTEXT);
    return { context, spanContext: this.api.trace.getSpanContext(context) };
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
