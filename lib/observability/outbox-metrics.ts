import {
  BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  OnApplicationBootstrap,
  OnApplicationShutdown,
  OnModuleInit,
} from '@nestjs/common';
import type * as PromClient from 'prom-client';
import { ResolvedOutboxOptions } from '../interfaces/outbox-module-options.interface';
import { OutboxStore } from '../interfaces/outbox-store.interface';
import { OUTBOX_RESOLVED_OPTIONS, OUTBOX_STORE } from '../outbox.constants';
import { assertInstalled } from '../optional-peers';
import {
  collectTallies,
  histogramInternalsKnown,
  HistogramWriter,
  isLazyMetric,
  lazyMetric,
  MetricTally,
} from './metric-tally';
import { ResolvedOutboxMetricsOptions } from './observability-options.interface';
import { OutboxEvents } from './outbox-events';

type Observer = { observe(value: number): void };

/** The metrics, by name (docs/monitoring.md). Labels are names from code, never ids or keys. */
interface Metrics {
  appended: PromClient.Counter<'type'>;
  deliveries: PromClient.Counter<'type' | 'handler' | 'outcome'>;
  leaseLost: PromClient.Counter<string>;
  abandoned: PromClient.Counter<'handler' | 'reason'>;
  abandonedRunning: PromClient.Gauge<string>;
  inbox: PromClient.Counter<'consumer' | 'outcome'>;
  storeErrors: PromClient.Counter<'operation'>;
  handlerDuration: PromClient.Histogram<'handler'>;
  deliveryLag: PromClient.Histogram<'handler'>;
  pending: PromClient.Gauge<string>;
  dead: PromClient.Gauge<string>;
  oldestPendingAge: PromClient.Gauge<string>;
}

/**
 * Prometheus metrics (optional peer `prom-client`), built on the event stream. Counters and
 * histograms follow the stream; the backlog gauges are set every `metrics.gaugeRefreshMs` by one
 * `store.stats()` call, so scrapes never reach the store. Active with the `metrics` option.
 */
@Injectable()
export class OutboxMetrics
  implements OnModuleInit, OnApplicationBootstrap, BeforeApplicationShutdown, OnApplicationShutdown
{
  private readonly logger = new Logger('OutboxMetrics');
  private readonly config: ResolvedOutboxMetricsOptions | null;
  private metrics: Metrics | null = null;
  private readonly unsubscribe: (() => void)[] = [];
  /** Delivery counts waiting for the next scrape (see `MetricTally`). */
  private tally: MetricTally | null = null;
  private timer: NodeJS.Timeout | null = null;
  private refreshing: Promise<void> | null = null;

  constructor(
    private readonly events: OutboxEvents,
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    @Inject(OUTBOX_RESOLVED_OPTIONS) options: ResolvedOutboxOptions,
  ) {
    this.config = options.observability?.metrics ?? null;
  }

  /** Whether the `metrics` option turned the metrics on. */
  get enabled(): boolean {
    return this.config !== null;
  }

  onModuleInit(): void {
    if (!this.config) return;
    assertInstalled('Outbox metrics (the metrics option)', ['prom-client']);
    const prom = require('prom-client') as typeof PromClient;
    this.metrics = createMetrics(prom, this.config);
    this.subscribe(this.metrics, histogramInternalsKnown(prom));
  }

  onApplicationBootstrap(): void {
    if (!this.config || this.config.gaugeRefreshMs === 0) return;
    void this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.config.gaugeRefreshMs);
    this.timer.unref();
  }

  async beforeApplicationShutdown(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.refreshing;
  }

  /** After the dispatcher's shutdown, so the outcomes it writes while draining are counted. */
  onApplicationShutdown(): void {
    for (const off of this.unsubscribe.splice(0)) off();
    // What was counted stays in the metrics after this app closes, as written at once would.
    this.tally?.close();
    this.tally = null;
  }

  /**
   * Sets the backlog gauges from one `store.stats()` call (done on the schedule; call it yourself
   * to refresh at once). A refresh already running is joined, not repeated.
   */
  refresh(): Promise<void> {
    const metrics = this.metrics;
    if (!metrics || !this.config?.gaugeRefreshMs) return Promise.resolve();
    this.refreshing ??= this.store
      .stats()
      .then(
        (stats) => {
          metrics.pending.set(stats.pending);
          metrics.dead.set(stats.dead);
          metrics.oldestPendingAge.set(stats.oldestPendingAgeMs / 1000);
        },
        (error: unknown) => {
          metrics.storeErrors.inc({ operation: 'stats' });
          this.logger.warn(
            `Could not refresh the outbox gauges: ${error instanceof Error ? error.message : String(error)}`,
          );
        },
      )
      .finally(() => (this.refreshing = null));
    return this.refreshing;
  }

  private subscribe(m: Metrics, writeHistograms: boolean): void {
    const { events } = this;
    // The delivery path's metrics skip prom-client's per-call label work (see MetricTally and
    // HistogramWriter); otherwise they go through labelled children looked up once per label
    // set (bounded: names from code).
    const lazy = <M extends object>(metric: M) => (isLazyMetric(metric) ? metric : undefined);
    const tally = new MetricTally({ deliveries: lazy(m.deliveries), appended: lazy(m.appended) });
    this.tally = tally;
    const deliveries = isLazyMetric(m.deliveries)
      ? (type: string, handler: string, outcome: string) =>
          tally.countDelivery(type, handler, outcome)
      : eagerDeliveries(m.deliveries);
    const appended = isLazyMetric(m.appended)
      ? (type: string) => tally.countAppended(type)
      : (type: string) => m.appended.inc({ type });
    const histogram = (metric: PromClient.Histogram<'handler'>) => {
      if (!writeHistograms) return eagerHistogram(metric);
      const writer = new HistogramWriter(metric);
      return (handler: string, seconds: number) => writer.observe(handler, seconds);
    };
    const duration = histogram(m.handlerDuration);
    const lag = histogram(m.deliveryLag);
    const run = (e: {
      handler: string;
      attempt: number;
      durationMs?: number;
      startedAt?: number;
      availableAt?: Date;
    }) => {
      if (e.durationMs === undefined || e.startedAt === undefined) return;
      duration(e.handler, e.durationMs / 1000);
      // Lag is commit (or scheduled time) to the first attempt's start; later attempts wait
      // for their backoff by design.
      if (e.attempt === 1 && e.availableAt) {
        lag(e.handler, Math.max(0, e.startedAt - e.availableAt.getTime()) / 1000);
      }
    };
    this.unsubscribe.push(
      events.on('appended', (e) => appended(e.type)),
      events.on('delivered', (e) => {
        deliveries(e.type, e.handler, 'delivered');
        run(e);
      }),
      events.on('retry-scheduled', (e) => {
        deliveries(e.type, e.handler, 'retried');
        run(e);
      }),
      events.on('dead-lettered', (e) => {
        deliveries(e.type, e.handler, 'dead_lettered');
        run(e);
      }),
      events.on('lease-lost', (e) => {
        deliveries(e.type, e.handler, 'lease_lost');
        m.leaseLost.inc();
      }),
      events.on('abandoned', (e) => {
        m.abandoned.inc({ handler: e.handler, reason: e.reason });
        m.abandonedRunning.inc();
      }),
      events.on('abandoned-settled', () => m.abandonedRunning.dec()),
      events.on(['inbox-processed', 'inbox-duplicate', 'inbox-failed'], (e) =>
        m.inbox.inc({ consumer: e.consumer, outcome: e.kind.slice('inbox-'.length) }),
      ),
      events.on('store-error', (e) => m.storeErrors.inc({ operation: e.operation })),
    );
  }
}

/** Counts deliveries into a counter at once, through children looked up once per label set. */
function eagerDeliveries(
  counter: PromClient.Counter<'type' | 'handler' | 'outcome'>,
): (type: string, handler: string, outcome: string) => void {
  // outcome → handler → type → child: no key string built per delivery.
  const children = new Map<string, Map<string, Map<string, { inc(): void }>>>();
  return (type, handler, outcome) => {
    let byHandler = children.get(outcome);
    if (!byHandler) children.set(outcome, (byHandler = new Map()));
    let byType = byHandler.get(handler);
    if (!byType) byHandler.set(handler, (byType = new Map()));
    let child = byType.get(type);
    if (!child) byType.set(type, (child = counter.labels({ type, handler, outcome })));
    child.inc();
  };
}

/** Observes into a histogram at once, through a child per handler. */
function eagerHistogram(
  histogram: PromClient.Histogram<'handler'>,
): (handler: string, seconds: number) => void {
  const children = new Map<string, Observer>();
  return (handler, seconds) => {
    let child = children.get(handler);
    if (!child) children.set(handler, (child = histogram.labels({ handler })));
    child.observe(seconds);
  };
}

/**
 * Registers the metrics, or takes them from the registry when another outbox in the process
 * registered them already (a registry holds one metric per name).
 */
function createMetrics(prom: typeof PromClient, config: ResolvedOutboxMetricsOptions): Metrics {
  const registry = (config.registry ?? prom.register) as PromClient.Registry;
  const registers = [registry];
  function metric<T>(name: string, create: () => T): T {
    return (registry.getSingleMetric(name) as T | undefined) ?? create();
  }
  const counter = <L extends string>(name: string, help: string, labelNames: L[]) =>
    metric(name, () => new prom.Counter<L>({ name, help, labelNames, registers }));
  // Counted on the delivery path: tallied, handed to prom-client when collected.
  const lazyCounter = <L extends string>(name: string, help: string, labelNames: L[]) =>
    metric(name, () =>
      lazyMetric(
        new prom.Counter<L>({ name, help, labelNames, registers, collect: collectTallies }),
      ),
    );
  const gauge = (name: string, help: string) =>
    metric(name, () => new prom.Gauge({ name, help, registers }));
  const histogram = (name: string, help: string, buckets: number[]) =>
    metric(
      name,
      () =>
        new prom.Histogram<'handler'>({ name, help, labelNames: ['handler'], buckets, registers }),
    );
  return {
    appended: lazyCounter('outbox_events_appended_total', 'Events appended, by type', ['type']),
    deliveries: lazyCounter(
      'outbox_deliveries_total',
      'Handler attempts by outcome: delivered, retried, dead_lettered, lease_lost',
      ['type', 'handler', 'outcome'],
    ),
    leaseLost: counter(
      'outbox_lease_lost_total',
      'Deliveries whose lease this worker lost (outcome discarded, redelivered later)',
      [],
    ),
    abandoned: counter(
      'outbox_abandoned_runs_total',
      'Handler runs given up on (timeout, lease lost, shutdown) that kept running, ignoring their abort signal',
      ['handler', 'reason'],
    ),
    abandonedRunning: gauge(
      'outbox_abandoned_runs_running',
      'Abandoned handler runs of this process still running',
    ),
    inbox: counter(
      'outbox_inbox_messages_total',
      'Inbox messages by consumer and outcome: processed, duplicate, failed',
      ['consumer', 'outcome'],
    ),
    storeErrors: counter(
      'outbox_store_errors_total',
      'Failed store calls of the dispatcher and the gauge refresh, by operation',
      ['operation'],
    ),
    handlerDuration: histogram(
      'outbox_handler_duration_seconds',
      'Time a handler attempt ran',
      config.handlerDurationBuckets,
    ),
    deliveryLag: histogram(
      'outbox_delivery_lag_seconds',
      'From the event becoming due (its commit, or scheduled time) to the start of its first attempt',
      config.deliveryLagBuckets,
    ),
    pending: gauge('outbox_pending', 'Deliveries waiting, due or scheduled (store-wide)'),
    dead: gauge('outbox_dead_letters', 'Dead letters (store-wide)'),
    oldestPendingAge: gauge(
      'outbox_oldest_pending_age_seconds',
      'Age of the oldest due pending delivery, by the store clock (store-wide)',
    ),
  };
}
