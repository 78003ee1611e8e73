import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OptionKeys, plainObject, positiveInt, refuseUnknownKeys } from '../option-fields';
import {
  OutboxMetricsOptions,
  PrometheusRegistryLike,
  ResolvedObservabilityOptions,
} from './observability-options.interface';

export const DEFAULT_HANDLER_DURATION_BUCKETS = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
];
export const DEFAULT_DELIVERY_LAG_BUCKETS = [
  0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
];

const METRICS_KEYS = {
  registry: true,
  gaugeRefreshMs: true,
  handlerDurationBuckets: true,
  deliveryLagBuckets: true,
} satisfies OptionKeys<OutboxMetricsOptions>;

/** Logs on, metrics and tracing off. */
export const DEFAULT_OBSERVABILITY: ResolvedObservabilityOptions = {
  logs: true,
  metrics: null,
  tracing: false,
};

function bool(field: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') {
    throw new OutboxOptionsError(field, `expected a boolean, got ${JSON.stringify(value)}`);
  }
  return value;
}

function buckets(field: string, value: unknown, fallback: number[]): number[] {
  if (value === undefined) return fallback;
  const ok =
    Array.isArray(value) &&
    value.length > 0 &&
    value.every(
      (b, i) =>
        typeof b === 'number' && b > 0 && Number.isFinite(b) && (i === 0 || b > value[i - 1]),
    );
  if (!ok) {
    throw new OutboxOptionsError(
      field,
      'expected a non-empty array of increasing positive numbers (seconds)',
    );
  }
  return value as number[];
}

/** Validates the `logs`, `metrics` and `tracing` module options. */
export function resolveObservabilityOptions(
  root: Record<string, unknown>,
): ResolvedObservabilityOptions {
  const logs = bool('logs', root.logs, true);
  const tracing = bool('tracing', root.tracing, false);
  let metrics: ResolvedObservabilityOptions['metrics'] = null;
  if (root.metrics !== undefined && root.metrics !== false) {
    const m = root.metrics === true ? {} : plainObject('metrics', root.metrics);
    refuseUnknownKeys('metrics', m, METRICS_KEYS);
    const registry = m.registry;
    if (
      registry !== undefined &&
      (typeof registry !== 'object' ||
        registry === null ||
        typeof (registry as { registerMetric?: unknown }).registerMetric !== 'function' ||
        typeof (registry as { getSingleMetric?: unknown }).getSingleMetric !== 'function')
    ) {
      throw new OutboxOptionsError(
        'metrics.registry',
        "expected a prom-client Registry (new Registry() from 'prom-client'), or leave it out for the default registry",
      );
    }
    metrics = {
      registry: (registry as PrometheusRegistryLike | undefined) ?? null,
      gaugeRefreshMs: positiveInt('metrics.gaugeRefreshMs', m.gaugeRefreshMs, 15_000, 0),
      handlerDurationBuckets: buckets(
        'metrics.handlerDurationBuckets',
        m.handlerDurationBuckets,
        DEFAULT_HANDLER_DURATION_BUCKETS,
      ),
      deliveryLagBuckets: buckets(
        'metrics.deliveryLagBuckets',
        m.deliveryLagBuckets,
        DEFAULT_DELIVERY_LAG_BUCKETS,
      ),
    };
    if (metrics.gaugeRefreshMs > 0 && metrics.gaugeRefreshMs < 100) {
      throw new OutboxOptionsError(
        'metrics.gaugeRefreshMs',
        `expected 0 (no gauges) or at least 100 ms, got ${metrics.gaugeRefreshMs}`,
      );
    }
  }
  return { logs, metrics, tracing };
}
