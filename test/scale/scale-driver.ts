import { INestApplicationContext, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { join } from 'node:path';
import type { DataSource } from 'typeorm';
import {
  ensureOutboxSchema,
  OutboxDispatcherStats,
  OutboxModule,
  OutboxService,
  OutboxStore,
  OUTBOX_STORE,
} from 'nestjs-outbox';
import { FixtureProcess, forkFixture } from '../support/child-process';
import { hostNow, Run, SCALE_TYPE, ScaleHandler, scaleStore } from './fixtures/scale-worker';

export type ScaleStoreKind = 'postgres' | 'redis';

export interface ScaleResult {
  runs: Run[];
  /** The worker `pause` froze. */
  pausedWorker: number | null;
  stats: OutboxDispatcherStats[];
  /** When the workers were sent 'go', on the clock of the runs' start and end. */
  startedAt: number;
  /** From the workers' start signal to the last handler run reported. */
  drainMs: number;
  store: OutboxStore;
}

/**
 * Starts `workers` worker processes, appends `events` (spread round-robin over `keys` keys, `n`
 * counting up within each key) from an API-style app while they boot, sends them 'go' together
 * once all are ready and waits until every event has run and the store holds nothing pending or
 * leased; then stops the workers (graceful shutdown) and collects their counters.
 */
export async function runScale(options: {
  kind: ScaleStoreKind;
  prefix: string;
  dataSource: DataSource | null;
  workers: number;
  events: number;
  keys: number;
  timeoutMs: number;
  leaseMs?: number;
  /**
   * Once `afterRuns` events ran, the worker reporting stops itself (SIGSTOP) inside a handler run,
   * holding that delivery's lease; SIGCONT comes after `ms` and once another worker re-ran it.
   */
  pause?: { afterRuns: number; ms: number };
}): Promise<ScaleResult & { close(): Promise<void> }> {
  const { kind, prefix, dataSource, events, keys } = options;
  if (dataSource) await ensureOutboxSchema(dataSource, { tablePrefix: prefix });
  @Module({
    imports: [
      OutboxModule.forRoot({
        store: scaleStore(kind, prefix, dataSource),
        dispatcher: { enabled: false, wakeups: false },
      }),
    ],
    // Registered here too, so appends write the handler's deliveries directly (no placeholders).
    providers: [ScaleHandler],
  })
  class ProducerModule {}
  const producer: INestApplicationContext = await NestFactory.createApplicationContext(
    ProducerModule,
    { logger: false },
  );
  const children: FixtureProcess[] = [];
  const runs: Run[] = [];
  const seen = new Set<string>();
  let lastRunAt = 0;
  let pausedWorker: number | null = null;
  let frozen: { id: string; rerun: () => void } | null = null;
  /**
   * SIGCONT once the frozen run's event ran again elsewhere (its lease expired and another worker
   * claimed it) and at least `ms` passed, so the frozen worker's outcome is surely fenced out.
   */
  const thaw = async (child: FixtureProcess, id: string, ms: number) => {
    const rerun = new Promise<void>((resolve) => (frozen = { id, rerun: resolve }));
    let bound: NodeJS.Timeout | undefined;
    await Promise.all([
      new Promise((resolve) => setTimeout(resolve, ms)),
      Promise.race([rerun, new Promise((resolve) => (bound = setTimeout(resolve, 30_000)))]),
    ]);
    clearTimeout(bound);
    process.kill(child.child.pid!, 'SIGCONT');
  };
  let allSeen: () => void = () => undefined;
  const done = new Promise<void>((resolve) => (allSeen = resolve));
  try {
    for (let w = 0; w < options.workers; w++) {
      const child = forkFixture(join(__dirname, 'fixtures', 'scale-worker.ts'), {
        SCALE_STORE: kind,
        SCALE_PREFIX: prefix,
        SCALE_WORKER_ID: `scale-${w}`,
        SCALE_LEASE_MS: String(options.leaseMs ?? 30_000),
      });
      child.child.on('message', (message: { runs?: Run[]; frozen?: string }) => {
        for (const run of message.runs ?? []) {
          runs.push(run);
          seen.add(run[0]);
          lastRunAt = Math.max(lastRunAt, run[5]);
          if (run[0] === frozen?.id) frozen.rerun();
        }
        if (seen.size === events) allSeen();
        // Freeze a worker that is draining: it stops itself inside its next handler run, so it
        // surely holds that delivery's lease while stopped.
        if (options.pause && pausedWorker === null && seen.size >= options.pause.afterRuns) {
          pausedWorker = w;
          child.send({ op: 'freeze' });
        }
        if (message.frozen && options.pause) void thaw(child, message.frozen, options.pause.ms);
      });
      children.push(child);
    }
    // The workers boot (seconds each on two busy cores) while the backlog is appended; their
    // dispatchers start only on 'go', below, so all of them still start on the whole backlog.
    const outbox = producer.get(OutboxService);
    for (let from = 0; from < events; from += 1_000) {
      const count = Math.min(1_000, events - from);
      await outbox.append(
        Array.from({ length: count }, (_, i) => {
          const index = from + i;
          return {
            type: SCALE_TYPE,
            key: `k${index % keys}`,
            payload: { n: Math.floor(index / keys) },
          };
        }),
      );
    }
    await Promise.all(children.map((c) => c.next((m) => m === 'ready')));
    const startedAt = hostNow();
    for (const child of children) child.send({ op: 'go' });
    let timer: NodeJS.Timeout | undefined;
    let timedOut = false;
    const store = producer.get<OutboxStore>(OUTBOX_STORE);
    // Every event ran once; but a run whose ack was refused (its lease ran out first: a frozen
    // worker, or a busy machine) runs again later, so the workers stop only once the store holds
    // nothing pending or leased.
    const drained = async () => {
      await done;
      for (;;) {
        const { pending, leased } = await store.stats();
        if ((pending === 0 && leased === 0) || timedOut) return;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    };
    await Promise.race([
      drained(),
      new Promise<never>((_, fail) => {
        timer = setTimeout(() => {
          timedOut = true;
          fail(new Error(`${seen.size} of ${events} events ran in ${options.timeoutMs} ms`));
        }, options.timeoutMs);
      }),
    ]).finally(() => clearTimeout(timer));
    const drainMs = lastRunAt - startedAt;
    const stats: OutboxDispatcherStats[] = [];
    await Promise.all(
      children.map(async (child, index) => {
        const final = child.next<{ stats: OutboxDispatcherStats }>(
          (m) => typeof m === 'object' && m !== null && 'stats' in m,
        );
        child.send({ op: 'stop' });
        stats[index] = (await final).stats;
        await child.exited;
      }),
    );
    return {
      runs,
      pausedWorker,
      stats,
      startedAt,
      drainMs,
      store,
      close: () => producer.close(),
    };
  } catch (error) {
    await Promise.all(children.map((c) => c.kill()));
    await producer.close();
    throw error;
  }
}
