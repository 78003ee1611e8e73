import type * as PromClient from 'prom-client';

/*
 * The delivery path's metrics without prom-client's per-call label validation and hashing (a
 * delivery costs a few map lookups and additions). What a scrape shows is unchanged: the same
 * metrics, labels and values, formatted by prom-client itself.
 *
 * - Counters count into plain numbers (`MetricTally`) handed to prom-client when a scrape
 *   collects them (their `collect` callback). Only counters this module created do
 *   (`lazyMetric`); one of the same name that something else registered first is written to at
 *   once, as prom-client is usually used.
 * - Histograms (`HistogramWriter`) add each observation to the values prom-client keeps for the
 *   label set, as its `observe` does, found once per label set: the same sums in the same order.
 *   Used when prom-client keeps them as checked by `histogramInternalsKnown`, else `observe`.
 */

/** A counter's count for one label set, not yet handed to prom-client. */
interface CounterCell {
  readonly labels: Record<string, string>;
  n: number;
}

/** What prom-client 15 keeps per label set of a histogram (read by `histogramInternalsKnown`). */
interface HistogramEntry {
  labels: Record<string, string | number>;
  bucketValues: Record<string, number>;
  sum: number;
  count: number;
}

type InternalHistogram = { hashMap: Record<string, HistogramEntry>; upperBounds: number[] };

/** Tallies each metric this module created hands over when collected. */
const tallies = new WeakMap<object, Set<MetricTally>>();

/**
 * The `collect` option of a metric this module creates: hands it every tally's pending counts.
 * Register the metric with `lazyMetric` once created.
 */
export function collectTallies(this: object): void {
  for (const tally of tallies.get(this) ?? []) tally.flush();
}

/** Marks a metric created with `collect: collectTallies`, so tallies may defer writes to it. */
export function lazyMetric<M extends object>(metric: M): M {
  if (!tallies.has(metric)) tallies.set(metric, new Set());
  return metric;
}

/** Whether `metric` was created by `lazyMetric` (in this copy of the module). */
export function isLazyMetric(metric: object): boolean {
  return tallies.has(metric);
}

/**
 * Whether prom-client keeps histogram values as this module writes them (prom-client 15:
 * `hashMap` entries of `{ labels, bucketValues, sum, count }` over `upperBounds`). Checked once
 * on a histogram registered nowhere; otherwise histograms are observed at once.
 */
export function histogramInternalsKnown(prom: typeof PromClient): boolean {
  try {
    const probe = new prom.Histogram({
      name: 'outbox_probe',
      help: 'probe',
      labelNames: ['handler'],
      buckets: [1, 2],
      registers: [],
    });
    probe.observe({ handler: 'x' }, 1.5);
    probe.zero({ handler: 'y' });
    const { hashMap, upperBounds } = probe as unknown as InternalHistogram;
    const entries = Object.values(hashMap ?? {});
    const [entry, zero] = entries;
    return (
      Array.isArray(upperBounds) &&
      upperBounds.join() === '1,2' &&
      entries.length === 2 &&
      entry.labels?.handler === 'x' &&
      zero.labels?.handler === 'y' &&
      zero.count === 0 &&
      entry.sum === 1.5 &&
      entry.count === 1 &&
      entry.bucketValues?.[1] === 0 &&
      entry.bucketValues?.[2] === 1
    );
  } catch {
    return false;
  }
}

/**
 * One app's pending counts for the delivery metrics. `count*` and `observe*` are the delivery
 * path; `flush` (from any of the metrics' `collect`, or at shutdown) hands them over.
 */
export class MetricTally {
  /** outcome → handler → type → cell: no key string built per delivery. */
  private readonly deliveries = new Map<string, Map<string, Map<string, CounterCell>>>();
  private readonly appended = new Map<string, CounterCell>();
  private readonly metrics: object[];

  /** The metrics given are written to at `flush`; give only metrics `isLazyMetric` accepts. */
  constructor(
    private readonly to: {
      deliveries?: PromClient.Counter<'type' | 'handler' | 'outcome'>;
      appended?: PromClient.Counter<'type'>;
    },
  ) {
    this.metrics = Object.values(to).filter((m) => m !== undefined) as object[];
    for (const metric of this.metrics) tallies.get(metric)?.add(this);
  }

  countDelivery(type: string, handler: string, outcome: string): void {
    let byHandler = this.deliveries.get(outcome);
    if (!byHandler) this.deliveries.set(outcome, (byHandler = new Map()));
    let byType = byHandler.get(handler);
    if (!byType) byHandler.set(handler, (byType = new Map()));
    let cell = byType.get(type);
    if (!cell) byType.set(type, (cell = { labels: { type, handler, outcome }, n: 0 }));
    cell.n++;
  }

  countAppended(type: string): void {
    let cell = this.appended.get(type);
    if (!cell) this.appended.set(type, (cell = { labels: { type }, n: 0 }));
    cell.n++;
  }

  /** Hands every pending count to prom-client (integers: the sums come out the same). */
  flush(): void {
    const { deliveries, appended } = this.to;
    if (deliveries) {
      for (const byHandler of this.deliveries.values()) {
        for (const byType of byHandler.values()) {
          for (const cell of byType.values()) flushCounter(deliveries, cell);
        }
      }
    }
    if (appended) for (const cell of this.appended.values()) flushCounter(appended, cell);
  }

  /** Flushes, and stops taking part in the metrics' collection. */
  close(): void {
    this.flush();
    for (const metric of this.metrics) tallies.get(metric)?.delete(this);
  }
}

function flushCounter(metric: PromClient.Counter<string>, cell: CounterCell): void {
  if (cell.n === 0) return;
  metric.inc(cell.labels, cell.n);
  cell.n = 0;
}

/**
 * Observes a histogram's `handler` label sets by adding to the values prom-client keeps for them
 * (found once per label set; found again when `reset` or `remove` replaced them).
 */
export class HistogramWriter {
  private readonly cells = new Map<string, { key: string; entry: HistogramEntry }>();
  private readonly bounds: number[];
  /** The bounds as the property names prom-client's bucket values use. */
  private readonly names: string[];

  constructor(private readonly histogram: PromClient.Histogram<'handler'>) {
    this.bounds = (histogram as unknown as InternalHistogram).upperBounds;
    this.names = this.bounds.map(String);
  }

  observe(handler: string, value: number): void {
    // prom-client's own refusal (a TypeError) for what it would not count.
    if (!Number.isFinite(value)) return this.histogram.observe({ handler }, value);
    const { hashMap } = this.histogram as unknown as InternalHistogram;
    let cell = this.cells.get(handler);
    if (cell === undefined || hashMap[cell.key] !== cell.entry) cell = this.attach(handler);
    // As prom-client's observe: the first bound at or over the value (none: +Inf only).
    const { bounds } = this;
    for (let i = 0; i < bounds.length; i++) {
      if (value <= bounds[i]) {
        cell.entry.bucketValues[this.names[i]] += 1;
        break;
      }
    }
    cell.entry.sum += value;
    cell.entry.count += 1;
  }

  private attach(handler: string): { key: string; entry: HistogramEntry } {
    let found = this.find(handler);
    if (!found) {
      this.histogram.zero({ handler });
      found = this.find(handler)!;
    }
    this.cells.set(handler, found);
    return found;
  }

  private find(handler: string): { key: string; entry: HistogramEntry } | undefined {
    const { hashMap } = this.histogram as unknown as InternalHistogram;
    for (const key in hashMap) {
      const entry = hashMap[key];
      if (entry.labels.handler === handler && Object.keys(entry.labels).length === 1) {
        return { key, entry };
      }
    }
    return undefined;
  }
}
