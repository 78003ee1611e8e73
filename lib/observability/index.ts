export { OutboxEvents, OUTBOX_EVENT_EMITTER_PREFIX } from './outbox-events';
export * from './outbox-events.interface';
export { OutboxMetrics } from './outbox-metrics';
export { OutboxHealthIndicator } from './outbox-health.indicator';
export type {
  OutboxHealthOptions,
  OutboxHealthDetails,
  OutboxHealthResult,
} from './outbox-health.indicator';
export type {
  OutboxMetricsOptions,
  PrometheusRegistryLike,
} from './observability-options.interface';
