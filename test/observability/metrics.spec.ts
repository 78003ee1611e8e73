import { Injectable } from '@nestjs/common';
import { Counter, Histogram, Registry } from 'prom-client';
import { DataSource } from 'typeorm';
import {
  Inbox,
  MemoryOutboxStore,
  NonRetryableError,
  OutboxEvents,
  OutboxHandler,
  OutboxHandlerContext,
  OutboxMetrics,
  OutboxObservation,
} from 'nestjs-outbox';
import { createOutboxApp, TestApp } from '../support/outbox-app';

/** The value of one sample in the registry, 0 when absent. */
async function sample(
  registry: Registry,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const base = name.replace(/_(count|sum|bucket)$/, '');
  const metric = (await registry.getMetricsAsJSON()).find((m) => m.name === base);
  const matching = metric?.values.filter(
    (v) =>
      ((v as { metricName?: string }).metricName ?? base) === name &&
      Object.entries(labels).every(([k, value]) => String(v.labels[k]) === value),
  );
  return matching?.reduce((sum, v) => sum + v.value, 0) ?? 0;
}

describe('Prometheus metrics', () => {
  let t: TestApp | undefined;
  let inboxDb: DataSource | undefined;
  afterEach(async () => {
    await t?.app.close();
    await inboxDb?.destroy();
    t = inboxDb = undefined;
  });

  it('after successes, a retry, a dead letter, a lease loss and an inbox duplicate, the registry says so', async () => {
    let offsetMs = 0;
    const store = new MemoryOutboxStore({ clock: () => new Date(Date.now() + offsetMs) });
    inboxDb = await new DataSource({ type: 'better-sqlite3', database: ':memory:' }).initialize();
    let flakyRuns = 0;
    let ledgerRuns = 0;

    @Injectable()
    class Handlers {
      @OutboxHandler('order.placed', { name: 'mailer' })
      mail() {}

      @OutboxHandler('order.flaky', { name: 'flaky' })
      async flaky() {
        if (++flakyRuns === 1) throw new Error('smtp down');
        await new Promise((resolve) => setTimeout(resolve, 30));
      }

      @OutboxHandler('order.doomed', { name: 'doomed' })
      doomed() {
        throw new NonRetryableError('bad address');
      }

      /**
       * Its first run commits its inbox record, then outlives its lease (the store clock jumps
       * past it): the ack is fenced out and the delivery comes again, as an inbox duplicate.
       */
      @OutboxHandler('order.paid', { name: 'ledger' })
      @Inbox({ consumer: 'ledger' })
      ledger(_event: unknown, context: OutboxHandlerContext) {
        ledgerRuns++;
        if (context.attempt === 1) offsetMs += 10_000;
      }
    }

    const registry = new Registry();
    t = await createOutboxApp([Handlers], {
      store,
      dispatcher: { leaseMs: 3_000 },
      module: { metrics: { registry, gaugeRefreshMs: 60_000 }, inbox: { dataSource: inboxDb } },
    });
    const seen: OutboxObservation[] = [];
    t.get(OutboxEvents).on((e) => seen.push(e));

    await t.outbox.append([
      { type: 'order.placed', payload: { secret: 'card-4242' } },
      { type: 'order.placed', payload: {} },
      { type: 'order.placed', payload: {} },
      { type: 'order.flaky', payload: {} },
      { type: 'order.doomed', payload: {} },
    ]);
    await t.dispatcher.drain();
    offsetMs += 1_000; // the retry comes due
    await t.dispatcher.drain();
    await t.outbox.append({ type: 'order.paid', payload: {} });
    await t.dispatcher.drain();

    // What happened, as the handlers saw it: the ledger's redelivery was an inbox duplicate, so
    // its method did not run again.
    expect({ flakyRuns, ledgerRuns }).toEqual({ flakyRuns: 2, ledgerRuns: 1 });
    expect(t.dispatcher.stats()).toMatchObject({
      leaseLost: 1,
      deadLettered: 1,
      retried: 1,
      succeeded: 5,
    });

    const deliveries = (type: string, handler: string, outcome: string) =>
      sample(registry, 'outbox_deliveries_total', { type, handler, outcome });
    expect(await sample(registry, 'outbox_events_appended_total', { type: 'order.placed' })).toBe(
      3,
    );
    expect(await sample(registry, 'outbox_events_appended_total')).toBe(6);
    expect(await deliveries('order.placed', 'mailer', 'delivered')).toBe(3);
    expect(await deliveries('order.flaky', 'flaky', 'retried')).toBe(1);
    expect(await deliveries('order.flaky', 'flaky', 'delivered')).toBe(1);
    expect(await deliveries('order.doomed', 'doomed', 'dead_lettered')).toBe(1);
    expect(await deliveries('order.paid', 'ledger', 'lease_lost')).toBe(1);
    expect(await deliveries('order.paid', 'ledger', 'delivered')).toBe(1);
    expect(await sample(registry, 'outbox_deliveries_total')).toBe(8);
    expect(await sample(registry, 'outbox_lease_lost_total')).toBe(1);
    expect(
      await sample(registry, 'outbox_inbox_messages_total', {
        consumer: 'ledger',
        outcome: 'processed',
      }),
    ).toBe(1);
    expect(
      await sample(registry, 'outbox_inbox_messages_total', {
        consumer: 'ledger',
        outcome: 'duplicate',
      }),
    ).toBe(1);
    expect(await sample(registry, 'outbox_store_errors_total')).toBe(0);

    // One duration per attempt whose outcome was written (the fenced-out one has none).
    const durations = (handler: string) =>
      sample(registry, 'outbox_handler_duration_seconds_count', { handler });
    expect(await durations('mailer')).toBe(3);
    expect(await durations('flaky')).toBe(2);
    expect(await durations('doomed')).toBe(1);
    expect(await durations('ledger')).toBe(1);
    expect(
      await sample(registry, 'outbox_handler_duration_seconds_sum', { handler: 'flaky' }),
    ).toBeGreaterThanOrEqual(0.025);
    // Lag: first attempts only (the retry waited for its backoff on purpose).
    const lag = (handler: string) =>
      sample(registry, 'outbox_delivery_lag_seconds_count', { handler });
    expect([await lag('mailer'), await lag('flaky'), await lag('doomed')]).toEqual([3, 1, 1]);

    // Labels are names from code: no event id, delivery id, key or payload anywhere.
    const text = await registry.metrics();
    for (const e of seen) {
      if ('eventId' in e) expect(text).not.toContain(e.eventId);
      if ('deliveryId' in e) expect(text).not.toContain(e.deliveryId);
    }
    expect(text).not.toContain('card-4242');
  });

  it("scrapes show exactly what prom-client's own calls for each event would, across scrapes, a reset and after the app closed", async () => {
    let offsetMs = 0;
    const store = new MemoryOutboxStore({ clock: () => new Date(Date.now() + offsetMs) });
    let flakyRuns = 0;
    @Injectable()
    class Handlers {
      @OutboxHandler('order.placed', { name: 'mailer' })
      mail() {}

      @OutboxHandler('order.placed', { name: 'flaky' })
      async flaky() {
        if (++flakyRuns % 3 === 1) throw new Error('smtp down');
        await new Promise((resolve) => setTimeout(resolve, 3));
      }

      @OutboxHandler('order.doomed', { name: 'doomed' })
      doomed() {
        throw new NonRetryableError('bad address');
      }
    }
    const registry = new Registry();
    const handlerDurationBuckets = [0.0005, 0.002, 0.01, 1];
    const deliveryLagBuckets = [0.001, 0.05, 1, 10];
    t = await createOutboxApp([Handlers], {
      store,
      module: {
        metrics: { registry, gaugeRefreshMs: 0, handlerDurationBuckets, deliveryLagBuckets },
      },
    });
    const seen: OutboxObservation[] = [];
    t.get(OutboxEvents).on((e) => seen.push(e));
    const names = [
      'outbox_events_appended_total',
      'outbox_deliveries_total',
      'outbox_handler_duration_seconds',
      'outbox_delivery_lag_seconds',
    ];
    const scrape = async () =>
      Promise.all(names.map((name) => registry.getSingleMetricAsString(name)));

    /** The same metrics written at once by prom-client, from the event stream. */
    // Read before anything is counted: reading the registry collects it.
    const help = Object.fromEntries(
      (await registry.getMetricsAsJSON()).map((m) => [m.name, m.help]),
    );
    const replay = async (): Promise<string[]> => {
      const reference = new Registry();
      const registers = [reference];
      const appended = new Counter({
        name: names[0],
        help: help[names[0]],
        labelNames: ['type'],
        registers,
      });
      const deliveries = new Counter({
        name: names[1],
        help: help[names[1]],
        labelNames: ['type', 'handler', 'outcome'],
        registers,
      });
      const duration = new Histogram({
        name: names[2],
        help: help[names[2]],
        labelNames: ['handler'],
        buckets: handlerDurationBuckets,
        registers,
      });
      const lag = new Histogram({
        name: names[3],
        help: help[names[3]],
        labelNames: ['handler'],
        buckets: deliveryLagBuckets,
        registers,
      });
      const outcomes = {
        delivered: 'delivered',
        'retry-scheduled': 'retried',
        'dead-lettered': 'dead_lettered',
      } as const;
      for (const e of seen) {
        if (e.kind === 'appended') appended.inc({ type: e.type });
        if (e.kind === 'delivered' || e.kind === 'retry-scheduled' || e.kind === 'dead-lettered') {
          deliveries.inc({ type: e.type, handler: e.handler, outcome: outcomes[e.kind] });
          duration.observe({ handler: e.handler }, e.durationMs! / 1000);
          if (e.attempt === 1 && e.availableAt) {
            lag.observe(
              { handler: e.handler },
              Math.max(0, e.startedAt! - e.availableAt.getTime()) / 1000,
            );
          }
        }
      }
      return Promise.all(names.map((name) => reference.getSingleMetricAsString(name)));
    };

    const round = async () => {
      await t!.outbox.append([
        ...Array.from({ length: 7 }, () => ({ type: 'order.placed', payload: {} })),
        { type: 'order.doomed', payload: {} },
      ]);
      await t!.dispatcher.drain();
      offsetMs += 1_000; // retries come due
      await t!.dispatcher.drain();
    };
    await round();
    expect(await scrape()).toEqual(await replay());
    await round();
    await round();
    expect(await scrape()).toEqual(await replay());
    expect(
      await sample(registry, 'outbox_deliveries_total', { outcome: 'retried' }),
    ).toBeGreaterThan(0);
    // The registry reset (prom-client's resetMetrics): it counts from zero again.
    registry.resetMetrics();
    seen.length = 0;
    await round();
    expect(await scrape()).toEqual(await replay());
    // Counted after the last scrape, then the app closed: still in the registry.
    await round();
    const expected = await replay();
    await t.app.close();
    t = undefined;
    expect(await scrape()).toEqual(expected);
  });

  it('counts into a metric of the same name the app registered first', async () => {
    const registry = new Registry();
    const own = new Counter({
      name: 'outbox_deliveries_total',
      help: 'registered by the app',
      labelNames: ['type', 'handler', 'outcome'],
      registers: [registry],
    });
    @Injectable()
    class Mailer {
      @OutboxHandler('order.placed', { name: 'mailer' })
      mail() {}
    }
    t = await createOutboxApp([Mailer], { module: { metrics: { registry, gaugeRefreshMs: 0 } } });
    await t.outbox.append([
      { type: 'order.placed', payload: {} },
      { type: 'order.placed', payload: {} },
    ]);
    await t.dispatcher.drain();
    expect(registry.getSingleMetric('outbox_deliveries_total')).toBe(own);
    expect(await sample(registry, 'outbox_deliveries_total', { outcome: 'delivered' })).toBe(2);
  });

  it('gauges come from one store.stats() per refresh, never from a scrape', async () => {
    const store = new MemoryOutboxStore();
    @Injectable()
    class Doomed {
      @OutboxHandler('doomed.event', { name: 'doomed' })
      run() {
        throw new NonRetryableError('no');
      }
    }
    const registry = new Registry();
    t = await createOutboxApp([Doomed], {
      store,
      module: { metrics: { registry, gaugeRefreshMs: 60_000 } },
    });
    await t.outbox.append([
      { type: 'doomed.event', payload: {} },
      { type: 'doomed.event', payload: {} },
    ]);
    await t.dispatcher.drain();
    await t.outbox.append({ type: 'nobody.handles', payload: {} });
    const stats = jest.spyOn(store, 'stats');
    for (let i = 0; i < 5; i++) await registry.metrics();
    expect(stats).not.toHaveBeenCalled();
    await t.get(OutboxMetrics).refresh();
    expect(stats).toHaveBeenCalledTimes(1);
    expect(await sample(registry, 'outbox_dead_letters')).toBe(2);
    expect(await sample(registry, 'outbox_pending')).toBe(1);
    expect(await sample(registry, 'outbox_oldest_pending_age_seconds')).toBeGreaterThanOrEqual(0);
    // A store that fails the refresh is counted, and the gauges keep their last values.
    stats.mockRejectedValueOnce(new Error('connection refused'));
    await t.get(OutboxMetrics).refresh();
    expect(await sample(registry, 'outbox_store_errors_total', { operation: 'stats' })).toBe(1);
    expect(await sample(registry, 'outbox_dead_letters')).toBe(2);
  });

  it('goes to prom-client default registry with metrics: true, and two apps share the metrics', async () => {
    const { register } = await import('prom-client');
    register.clear();
    t = await createOutboxApp([], { module: { metrics: true } });
    const second = await createOutboxApp([], { module: { metrics: true } });
    try {
      await t.outbox.append({ type: 'a.b', payload: {} });
      await second.outbox.append({ type: 'a.b', payload: {} });
      expect(await sample(register, 'outbox_events_appended_total', { type: 'a.b' })).toBe(2);
    } finally {
      await second.app.close();
      register.clear();
    }
  });

  it('is off by default, and bad metric options fail bootstrap naming the field', async () => {
    t = await createOutboxApp([]);
    expect(t.get(OutboxMetrics).enabled).toBe(false);
    await t.app.close();
    t = undefined;
    await expect(
      createOutboxApp([], { module: { metrics: { registry: {} as never } } }),
    ).rejects.toThrow('Invalid OutboxModule option "metrics.registry"');
    await expect(
      createOutboxApp([], { module: { metrics: { gaugeRefreshMs: 5 } } }),
    ).rejects.toThrow('Invalid OutboxModule option "metrics.gaugeRefreshMs"');
    await expect(
      createOutboxApp([], { module: { metrics: { deliveryLagBuckets: [1, 0.5] } } }),
    ).rejects.toThrow('Invalid OutboxModule option "metrics.deliveryLagBuckets"');
    await expect(createOutboxApp([], { module: { tracing: 'yes' as never } })).rejects.toThrow(
      'Invalid OutboxModule option "tracing"',
    );
  });
});
