/**
 * The part of a prom-client `Registry` the outbox uses; pass your own registry here (any
 * prom-client 15 `Registry` fits).
 */
export interface PrometheusRegistryLike {
  registerMetric(metric: never): void;
  getSingleMetric(name: string): unknown;
}

/** Prometheus metrics (optional peer `prom-client`), docs/monitoring.md. */
export interface OutboxMetricsOptions {
  /** Where the metrics are registered. @default prom-client's default `register` (the app's registry) */
  registry?: PrometheusRegistryLike;
  /**
   * How often the backlog gauges (`outbox_pending`, `outbox_dead_letters`,
   * `outbox_oldest_pending_age_seconds`) are refreshed, with one `store.stats()` call each time
   * (scrapes never query the store). 0 leaves them out. @default 15000
   */
  gaugeRefreshMs?: number;
  /** Buckets of `outbox_handler_duration_seconds`. @default [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60] */
  handlerDurationBuckets?: number[];
  /** Buckets of `outbox_delivery_lag_seconds`. @default [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600] */
  deliveryLagBuckets?: number[];
}

export interface ResolvedOutboxMetricsOptions {
  registry: PrometheusRegistryLike | null;
  gaugeRefreshMs: number;
  handlerDurationBuckets: number[];
  deliveryLagBuckets: number[];
}

/** Resolved `logs`, `metrics` and `tracing` options. */
export interface ResolvedObservabilityOptions {
  logs: boolean;
  metrics: ResolvedOutboxMetricsOptions | null;
  tracing: boolean;
}
