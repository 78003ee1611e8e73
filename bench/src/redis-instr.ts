/*
 * Redis store: instructions the Redis server executes per delivery, by phase (append, claim,
 * ackMany), counted by callgrind — a figure that machine load does not move, unlike CPU time.
 * Start a Redis of its own under callgrind with instrumentation off, then run this against it:
 *
 *   valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.%p.out \
 *     redis-server --port 6393 --save "" --appendonly no &
 *   BENCH_REDIS_URL=redis://127.0.0.1:6393 BENCH_LIB=<lib> node -r ../node_modules/ts-node/register/transpile-only src/redis-instr.ts
 *
 * Each phase: `callgrind_control -z` and `-i on`, the phase, `-d` (dump), `-i off`; the dump's
 * total divided by N. Same workload as redis-cost.ts (N events, one handler, no key, 100 per
 * claim and ackMany). Prints `REDIS_INSTR {append, claim, ackMany}` in thousands per delivery.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, basename, join } from 'node:path';
import { envInt, REDIS_URL } from './common';
import { stores } from './lib';
import type { Lease } from '../../lib';

const N = envInt('BENCH_REDIS_INSTR_N', 3_000);
const BATCH = 100;
const OUT = process.env.BENCH_CALLGRIND_OUT ?? '/tmp/cg.%p.out';

async function main(): Promise<void> {
  const Redis = require('ioredis');
  const client = new Redis(REDIS_URL, { maxRetriesPerRequest: 3 });
  const prefix = `bench-instr-${process.pid}`;
  const pid = String(/process_id:(\d+)/.exec(await client.info('server'))![1]);
  const store = new stores.RedisOutboxStore({ client, prefix });
  const handlers = [{ name: 'H', types: ['order.placed'] }];
  const dumps = () => {
    const dir = dirname(OUT);
    const stem = basename(OUT).replace('%p', pid);
    return readdirSync(dir)
      .filter((f) => f.startsWith(`${stem}.`))
      .map((f) => join(dir, f));
  };
  const measure = async (phase: () => Promise<void>): Promise<number> => {
    execFileSync('callgrind_control', ['-z', pid]);
    execFileSync('callgrind_control', ['-i', 'on', pid]);
    await phase();
    execFileSync('callgrind_control', ['-d', pid]);
    execFileSync('callgrind_control', ['-i', 'off', pid]);
    const last = dumps().sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0];
    const total = /^(?:summary|totals): (\d+)/m.exec(readFileSync(last, 'utf8'));
    return +(Number(total![1]) / N / 1000).toFixed(1);
  };
  try {
    const append = await measure(async () => {
      for (let i = 0; i < N; i += 500) {
        await store.append(
          Array.from({ length: Math.min(500, N - i) }, (_, j) => ({
            id: `${prefix}-${i + j}`,
            type: 'order.placed',
            key: null,
            payload: { orderId: i + j, total: i + j, lines: [{ sku: 'A-1', qty: 1 }] },
            headers: {},
            occurredAt: new Date(),
            availableAt: null,
            handlers: ['H'],
          })),
        );
      }
    });
    const leases: Lease[] = [];
    const claim = await measure(async () => {
      for (;;) {
        const got = await store.claim({ workerId: 'w1', handlers, limit: BATCH, leaseMs: 600_000 });
        if (got.length === 0) break;
        for (const d of got) leases.push(d.lease);
      }
    });
    const ackMany = await measure(async () => {
      for (let i = 0; i < leases.length; i += BATCH)
        await store.ackMany(leases.slice(i, i + BATCH));
    });
    if (leases.length !== N) throw new Error(`claimed ${leases.length} of ${N}`);
    console.log(
      `REDIS_INSTR ${JSON.stringify({ n: N, kInstrPerDelivery: { append, claim, ackMany } })}`,
    );
  } finally {
    const keys: string[] = await client.keys(`{${prefix}}*`);
    if (keys.length > 0) await client.del(...keys);
    client.disconnect();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
