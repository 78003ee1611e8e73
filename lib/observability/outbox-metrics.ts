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
import { ResolvedOutboxMetricsOptions } from './observability-options.interface';
import { OutboxEvents } from './outbox-events';

type Observer = { observe(value: number): void };

/** The metrics, by name (README "Monitoring"). Labels are names from code, never ids or keys. */
interface Metrics {
  appended: PromClient.Counter<'type'>;
  deliveries: PromClient.Counter<'type' | 'handler' | 'outcome'>;
  leaseLost: PromClient.Counter<string>;
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
    this.subscribe(this.metrics);
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

  private subscribe(m: Metrics): void {
    const { events } = this;
    // Labelled children are looked up once per label set (bounded: names from code), not
    // hashed from an object on every delivery.
    // outcome → handler → type → child: no key string built per delivery.
    const children = new Map<string, Map<string, Map<string, { inc(): void }>>>();
    const deliveries = (type: string, handler: string, outcome: string) => {
      let byHandler = children.get(outcome);
      if (!byHandler) children.set(outcome, (byHandler = new Map()));
      let byType = byHandler.get(handler);
      if (!byType) byHandler.set(handler, (byType = new Map()));
      let child = byType.get(type);
      if (!child) byType.set(type, (child = m.deliveries.labels({ type, handler, outcome })));
      return child;
    };
    const histograms = new Map<string, { duration: Observer; lag: Observer }>();
    const run = (e: {
      handler: string;
      attempt: number;
      durationMs?: number;
      startedAt?: number;
      availableAt?: Date;
    }) => {
      if (e.durationMs === undefined || e.startedAt === undefined) return;
      let h = histograms.get(e.handler);
      if (!h) {
        h = {
          duration: m.handlerDuration.labels({ handler: e.handler }),
          lag: m.deliveryLag.labels({ handler: e.handler }),
        };
        histograms.set(e.handler, h);
      }
      h.duration.observe(e.durationMs / 1000);
      // Lag is commit (or scheduled time) to the first attempt's start; later attempts wait
      // for their backoff by design.
      if (e.attempt === 1 && e.availableAt) {
        h.lag.observe(Math.max(0, e.startedAt - e.availableAt.getTime()) / 1000);
      }
    };
    this.unsubscribe.push(
      events.on('appended', (e) => m.appended.inc({ type: e.type })),
      events.on('delivered', (e) => {
        deliveries(e.type, e.handler, 'delivered').inc();
        run(e);
      }),
      events.on('retry-scheduled', (e) => {
        deliveries(e.type, e.handler, 'retried').inc();
        run(e);
      }),
      events.on('dead-lettered', (e) => {
        deliveries(e.type, e.handler, 'dead_lettered').inc();
        run(e);
      }),
      events.on('lease-lost', (e) => {
        deliveries(e.type, e.handler, 'lease_lost').inc();
        m.leaseLost.inc();
      }),
      events.on(['inbox-processed', 'inbox-duplicate', 'inbox-failed'], (e) =>
        m.inbox.inc({ consumer: e.consumer, outcome: e.kind.slice('inbox-'.length) }),
      ),
      events.on('store-error', (e) => m.storeErrors.inc({ operation: e.operation })),
    );
  }
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
  const gauge = (name: string, help: string) =>
    metric(name, () => new prom.Gauge({ name, help, registers }));
  const histogram = (name: string, help: string, buckets: number[]) =>
    metric(
      name,
      () =>
        new prom.Histogram<'handler'>({ name, help, labelNames: ['handler'], buckets, registers }),
    );
  return {
    appended: counter('outbox_events_appended_total', 'Events appended, by type', ['type']),
    deliveries: counter(
      'outbox_deliveries_total',
      'Handler attempts by outcome: delivered, retried, dead_lettered, lease_lost',
      ['type', 'handler', 'outcome'],
    ),
    leaseLost: counter(
      'outbox_lease_lost_total',
      'Deliveries whose lease this worker lost (outcome discarded, redelivered later)',
      [],
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
