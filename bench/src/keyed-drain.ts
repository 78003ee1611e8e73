/*
 * Keyed drain (issue 27, run 14): how fast one worker drains a keyed backlog, where a claim can
 * take only the oldest open delivery of each key and the next event of a key becomes claimable
 * once its elder's ack is written. KEYS keys × PER_KEY events (appended round-robin, not timed),
 * then one dispatcher (library defaults but `pollInterval`, wake-ups off) with a handler that
 * yields once; ms = start → the last handler call. Also counts the claims, the empty ones and
 * their summed time (claims overlap: up to three in flight).
 *
 *   node -r ../node_modules/ts-node/register/transpile-only src/keyed-drain.ts
 *   BENCH_KEYED_KEYS (200), BENCH_KEYED_PER_KEY (100), BENCH_KEYED_POLL_MS (200), BENCH_LIB
 *   (see lib.ts: e.g. `.lib-before/lib` for another build), BENCH_PGDATABASE.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import { randomUUID } from 'node:crypto';
import { dropOutboxTables, envInt, openDataSource, TABLE_PREFIX } from './common';
import { lib, stores } from './lib';

const { ensureOutboxSchema, OutboxDispatcher, OutboxHandler, OutboxModule } = lib;
const KEYS = envInt('BENCH_KEYED_KEYS', 200);
const PER_KEY = envInt('BENCH_KEYED_PER_KEY', 100);
const POLL_MS = envInt('BENCH_KEYED_POLL_MS', 200);
const N = KEYS * PER_KEY;

let handled = 0;
let finished: () => void = () => undefined;
const allHandled = new Promise<void>((resolve) => (finished = resolve));

@Injectable()
class KeyedHandler {
  @OutboxHandler('keyed.step', { name: 'Keyed.step' })
  async step(): Promise<void> {
    await new Promise((resolve) => setImmediate(resolve));
    if (++handled === N) finished();
  }
}

async function main(): Promise<void> {
  const ds = await openDataSource('postgres');
  await dropOutboxTables(ds);
  try {
    await ensureOutboxSchema(ds, { tablePrefix: TABLE_PREFIX });
    const store = new stores.TypeOrmOutboxStore(ds, { tablePrefix: TABLE_PREFIX });
    for (let i = 0; i < N; i += 1000) {
      await store.append(
        Array.from({ length: Math.min(1000, N - i) }, (_, j) => ({
          id: randomUUID(),
          type: 'keyed.step',
          key: `k${(i + j) % KEYS}`,
          payload: { n: i + j },
          headers: {},
          occurredAt: new Date(),
          availableAt: null,
          handlers: ['Keyed.step'],
        })),
      );
    }
    await ds.query('ANALYZE');
    let claims = 0;
    let empty = 0;
    let claimMs = 0;
    const claim = store.claim.bind(store);
    store.claim = async (request) => {
      const sent = performance.now();
      const got = await claim(request);
      claims++;
      claimMs += performance.now() - sent;
      if (got.length === 0) empty++;
      return got;
    };
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: { type: 'custom', store },
          dispatcher: { enabled: false, wakeups: false, pollInterval: POLL_MS },
          retention: { cleanupIntervalMs: 0 },
        }),
      ],
      providers: [KeyedHandler],
    })
    class KeyedModule {}
    const app = await NestFactory.createApplicationContext(KeyedModule, { logger: false });
    const dispatcher = app.get(OutboxDispatcher);
    const t0 = performance.now();
    dispatcher.start();
    await allHandled;
    const ms = performance.now() - t0;
    await app.close();
    if (dispatcher.stats().succeeded !== N)
      throw new Error(`acknowledged ${dispatcher.stats().succeeded} of ${N}`);
    console.log(
      JSON.stringify({
        keys: KEYS,
        perKey: PER_KEY,
        pollMs: POLL_MS,
        ms: Math.round(ms),
        claims,
        empty,
        claimMs: Math.round(claimMs),
      }),
    );
  } finally {
    await dropOutboxTables(ds);
    await ds.destroy();
  }
}

void main().catch((error) => {
  console.error(error);
  process.exit(1);
});
