import { Injectable, LoggerService } from '@nestjs/common';
import { Registry } from 'prom-client';
import {
  AbandonedRunError,
  MemoryOutboxStore,
  OutboxEvent,
  OutboxEvents,
  OutboxHandler,
  OutboxHandlerContext,
  OutboxObservation,
} from 'nestjs-outbox';
import { createOutboxApp, deferred, TestApp } from '../support/outbox-app';

/** Waits (real time) until `check` holds; false when `ms` passed first. */
async function eventually(check: () => Promise<boolean> | boolean, ms = 5_000): Promise<boolean> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return check();
}

/** Keeps what the app logs, by level. */
class CapturingLogger implements LoggerService {
  readonly lines: { level: string; message: string }[] = [];
  log = (m: unknown) => this.lines.push({ level: 'log', message: String(m) });
  error = (m: unknown) => this.lines.push({ level: 'error', message: String(m) });
  warn = (m: unknown) => this.lines.push({ level: 'warn', message: String(m) });
  debug = () => undefined;
  verbose = () => undefined;
}

async function sample(registry: Registry, name: string, labels: Record<string, string> = {}) {
  const metric = (await registry.getMetricsAsJSON()).find((m) => m.name === name);
  return (metric?.values ?? [])
    .filter((v) => Object.entries(labels).every(([k, value]) => String(v.labels[k]) === value))
    .reduce((sum, v) => sum + v.value, 0);
}

/** docs/handlers.md (Retries, Leases) and Monitoring: abandoned runs. */
describe('a handler that ignores its abort signal', () => {
  const apps: TestApp[] = [];
  afterEach(async () => {
    for (const app of apps.splice(0)) await app.app.close();
  });

  it('is reported once abandoned (event, warning, stats, metrics) and again when it settles; a handler honouring its signal is not', async () => {
    const gate = deferred();
    @Injectable()
    class Handlers {
      @OutboxHandler('stuck', { name: 'stuck', timeoutMs: 100, maxAttempts: 2 })
      stuck() {
        return gate.promise; // ignores its signal
      }

      @OutboxHandler('polite', { name: 'polite', timeoutMs: 100, maxAttempts: 1 })
      polite(_e: OutboxEvent, ctx: OutboxHandlerContext) {
        return new Promise((_resolve, reject) =>
          ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)),
        );
      }
    }
    const registry = new Registry();
    const t = await createOutboxApp([Handlers], {
      dispatcher: { pollInterval: 20, workerId: 'w-1', backoff: { initialMs: 50, jitter: 0 } },
      module: { metrics: { registry, gaugeRefreshMs: 0 } },
    });
    apps.push(t);
    const logger = new CapturingLogger();
    t.app.useLogger(logger);
    const seen: OutboxObservation[] = [];
    t.get(OutboxEvents).on((e) => seen.push(e));

    const [stuck, polite] = await t.outbox.append([
      { type: 'stuck', payload: {} },
      { type: 'polite', payload: {} },
    ]);
    expect(await eventually(async () => (await t.store.stats()).dead === 2)).toBe(true);
    const { items } = await t.store.listDeadLetters({ limit: 10 });
    const dead = (id: string) => items.find((i) => i.eventId === id)!;
    expect(dead(polite.id).errors.map((e) => e.name)).toEqual(['HandlerTimeoutError']);
    expect(dead(stuck.id)).toMatchObject({ reason: 'exhausted', attempts: 2 });
    expect(dead(stuck.id).errors.map((e) => e.name)).toEqual([
      'HandlerTimeoutError',
      'AbandonedRunError',
    ]);
    expect(dead(stuck.id).errors[1].message).toBe(
      new AbandonedRunError('stuck', 'timeout', 100).message,
    );
    expect(dead(stuck.id).errors[1].message).toMatch(
      /timed out after 100 ms and its handler is still running, ignoring its abort signal/,
    );

    // Only the run that ignored its signal is abandoned.
    const abandoned = seen.filter((e) => e.kind === 'abandoned');
    expect(abandoned).toEqual([
      {
        kind: 'abandoned',
        eventId: stuck.id,
        type: 'stuck',
        deliveryId: expect.any(String),
        handler: 'stuck',
        attempt: 1,
        workerId: 'w-1',
        reason: 'timeout',
        timeoutMs: 100,
        startedAt: expect.any(Number),
      },
    ]);
    expect(t.dispatcher.stats()).toMatchObject({
      abandoned: 1,
      abandonedRunning: 1,
      failed: 3,
      deadLettered: 2,
    });
    expect(await sample(registry, 'outbox_abandoned_runs_total')).toBe(1);
    expect(
      await sample(registry, 'outbox_abandoned_runs_total', {
        handler: 'stuck',
        reason: 'timeout',
      }),
    ).toBe(1);
    expect(await sample(registry, 'outbox_abandoned_runs_running')).toBe(1);
    const warnings = logger.lines.filter((l) => l.level === 'warn').map((l) => l.message);
    expect(warnings).toContainEqual(
      expect.stringMatching(
        new RegExp(
          `^Handler stuck timed out after 100 ms on event ${stuck.id} \\(type stuck, attempt 1, worker w-1\\), delivery [0-9a-f-]+, and ignores its abort signal`,
        ),
      ),
    );

    // It settles at last: reported, and no longer counted as running.
    gate.resolve();
    expect(await eventually(() => t.dispatcher.stats().abandonedRunning === 0)).toBe(true);
    expect(seen.filter((e) => e.kind === 'abandoned-settled')).toEqual([
      expect.objectContaining({
        kind: 'abandoned-settled',
        eventId: stuck.id,
        handler: 'stuck',
        attempt: 1,
        failed: false,
        durationMs: expect.any(Number),
      }),
    ]);
    expect(await sample(registry, 'outbox_abandoned_runs_running')).toBe(0);
    expect(logger.lines).toContainEqual({
      level: 'log',
      message: expect.stringMatching(
        `^Abandoned handler stuck returned at last on event ${stuck.id} `,
      ),
    });
  });

  it('on one worker is never started beside itself; on another worker its next attempt runs beside it', async () => {
    let offsetMs = 0;
    const store = new MemoryOutboxStore({ clock: () => new Date(Date.now() + offsetMs) });
    const gate = deferred();
    const starts: string[] = [];
    let running = 0;
    let most = 0;
    @Injectable()
    class Job {
      @OutboxHandler('job', { name: 'job', timeoutMs: 100, maxAttempts: 5 })
      async handle(_e: OutboxEvent, ctx: OutboxHandlerContext) {
        starts.push(`${ctx.workerId}#${ctx.attempt}`);
        most = Math.max(most, ++running);
        // Worker a's run ignores its signal until the gate opens.
        if (ctx.workerId === 'a') await gate.promise;
        running--;
      }
    }
    const worker = async (workerId: string) => {
      const app = await createOutboxApp([Job], {
        store,
        dispatcher: { enabled: false, workerId, backoff: { initialMs: 10_000, jitter: 0 } },
      });
      apps.push(app);
      return app;
    };
    const a = await worker('a');
    const b = await worker('b');
    await a.outbox.append({ type: 'job', payload: {}, key: 'k' });

    // Attempt 1 on a times out; the retry is due 10 s later (store clock).
    await a.dispatcher.drain();
    expect(await eventually(() => a.dispatcher.stats().abandonedRunning === 1)).toBe(true);
    // Attempt 2, claimed by a while its first run still executes: not started, a failed attempt.
    offsetMs += 10_000;
    await a.dispatcher.drain();
    expect(starts).toEqual(['a#1']);
    expect(a.dispatcher.stats()).toMatchObject({ retried: 2, abandoned: 1 });
    // Attempt 3, claimed by b: it runs while a's first run still executes.
    offsetMs += 20_000;
    await b.dispatcher.drain();
    expect(starts).toEqual(['a#1', 'b#3']);
    expect(most).toBe(2);
    expect(b.dispatcher.stats()).toMatchObject({ succeeded: 1 });
    expect(await store.stats()).toMatchObject({ pending: 0, leased: 0, dead: 0 });

    // Once a's run has returned, a starts deliveries of the key again.
    gate.resolve();
    expect(await eventually(() => a.dispatcher.stats().abandonedRunning === 0)).toBe(true);
    await a.outbox.append({ type: 'job', payload: {}, key: 'k' });
    await a.dispatcher.drain();
    expect(starts).toEqual(['a#1', 'b#3', 'a#1']);
  });

  it('is reported abandoned with reason shutdown when the app closes under it', async () => {
    @Injectable()
    class Stuck {
      @OutboxHandler('stuck', { name: 'stuck' })
      handle() {
        return new Promise(() => undefined);
      }
    }
    const t = await createOutboxApp([Stuck], { dispatcher: { shutdownTimeoutMs: 50 } });
    const seen: OutboxObservation[] = [];
    t.get(OutboxEvents).on('abandoned', (e) => seen.push(e));
    await t.outbox.append({ type: 'stuck', payload: {} });
    expect(await eventually(() => t.dispatcher.stats().inFlight === 1)).toBe(true);
    await t.app.close();
    await new Promise((resolve) => setImmediate(resolve));
    expect(seen).toEqual([expect.objectContaining({ kind: 'abandoned', reason: 'shutdown' })]);
    expect(t.dispatcher.stats()).toMatchObject({ abandoned: 1, abandonedRunning: 1 });
  });

  it('dead-letters at once a delivery claimed past maxAttempts while its abandoned run still executes', async () => {
    let offsetMs = 0;
    const store = new MemoryOutboxStore({ clock: () => new Date(Date.now() + offsetMs) });
    let starts = 0;
    @Injectable()
    class Stuck {
      @OutboxHandler('stuck', { name: 'stuck', timeoutMs: 100, maxAttempts: 2 })
      handle() {
        starts++;
        return new Promise(() => undefined);
      }
    }
    const t = await createOutboxApp([Stuck], {
      store,
      dispatcher: { enabled: false, backoff: { initialMs: 10_000, jitter: 0 } },
    });
    apps.push(t);
    await t.outbox.append({ type: 'stuck', payload: {} });
    await t.dispatcher.drain();
    // Attempt 2 goes to a worker that dies without reporting; its lease lapses.
    offsetMs += 10_000;
    const handlers = [{ name: 'stuck', types: ['stuck'] }];
    expect(await store.claim({ workerId: 'dead', handlers, limit: 1, leaseMs: 100 })).toHaveLength(
      1,
    );
    offsetMs += 200;
    await t.dispatcher.drain();
    expect(starts).toBe(1);
    const { items } = await store.listDeadLetters({ limit: 10 });
    expect(items[0]).toMatchObject({ reason: 'exhausted', attempts: 3 });
    expect(await store.stats()).toMatchObject({ pending: 0, leased: 0, dead: 1 });
  });
});
