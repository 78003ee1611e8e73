/*
 * Redis store: server cost of each script per delivery, without the dispatcher (issue 9's Redis
 * part). N events (no key, one handler), BENCH_REDIS_COST_BATCH deliveries per claim and ackMany.
 * Phases: append (500 per call), claim everything (BATCH per call), ackMany everything (BATCH per
 * call). Around each phase, `INFO commandstats` / `INFO cpu` of the Redis at BENCH_REDIS_URL give:
 * script µs per delivery (EVALSHA's wall time inside Redis, which includes the commands it runs
 * and grows when the machine is loaded), commands run per delivery (the script call included),
 * and server CPU µs per delivery (user + sys of the Redis process: the figure that load does not
 * inflate); and this process's CPU per delivery in the claim and ack phases (the store's
 * JavaScript and ioredis, no dispatcher). One call at a time, so nothing queues inside Redis.
 *
 *   BENCH_REDIS_URL=redis://127.0.0.1:6390 node -r ../node_modules/ts-node/register/transpile-only src/redis-cost.ts
 *
 * Run it against a Redis of its own (the counters are server-wide). Prints one JSON line per
 * phase and a summary. Keys `{bench-cost}:*`, removed before and after.
 */
import {
  deleteRedisKeys,
  envInt,
  redisCostPerEvent,
  redisServerSnapshot,
  REDIS_URL,
} from './common';
import { stores } from './lib';
import type { Lease } from '../../lib';

const N = envInt('BENCH_REDIS_COST_N', 20_000);
const BATCH = envInt('BENCH_REDIS_COST_BATCH', 100);
const PREFIX = 'bench-cost';

async function main(): Promise<void> {
  const Redis = require('ioredis');
  const client = new Redis(REDIS_URL, { maxRetriesPerRequest: 3 });
  await deleteRedisKeys(`{${PREFIX}}*`);
  const store = new stores.RedisOutboxStore({ client, prefix: PREFIX });
  const handlers = [{ name: 'H', types: ['order.placed'] }];
  try {
    const phases: Record<string, unknown> = {};
    let before = await redisServerSnapshot();
    for (let i = 0; i < N; i += 500) {
      await store.append(
        Array.from({ length: Math.min(500, N - i) }, (_, j) => ({
          id: `${PREFIX}-${i + j}`,
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
    phases.append = redisCostPerEvent(before, await redisServerSnapshot(), N);
    // Claim everything, then acknowledge everything: one snapshot pair per phase, so the INFO
    // calls do not weigh on the figures.
    before = await redisServerSnapshot();
    const leases: Lease[] = [];
    let cpu = process.cpuUsage();
    for (;;) {
      const got = await store.claim({ workerId: 'w1', handlers, limit: BATCH, leaseMs: 600_000 });
      if (got.length === 0) break;
      for (const d of got) leases.push(d.lease);
    }
    const claimNode = process.cpuUsage(cpu);
    phases.claim = redisCostPerEvent(before, await redisServerSnapshot(), N);
    before = await redisServerSnapshot();
    let acked = 0;
    cpu = process.cpuUsage();
    for (let i = 0; i < leases.length; i += BATCH) {
      acked += (await store.ackMany(leases.slice(i, i + BATCH))).length;
    }
    const ackNode = process.cpuUsage(cpu);
    phases.ackMany = redisCostPerEvent(before, await redisServerSnapshot(), N);
    if (leases.length !== N || acked !== N) {
      throw new Error(`claimed ${leases.length}, acked ${acked} of ${N}`);
    }
    const stats = await store.stats();
    if (stats.pending !== 0 || stats.leased !== 0) throw new Error(JSON.stringify(stats));
    const pick = (p: unknown) => {
      const { scriptUsPerEvent, callsPerEvent, cpuMsPer1000 } = p as Record<string, number>;
      return { scriptUs: scriptUsPerEvent, commands: callsPerEvent, cpuUs: cpuMsPer1000 };
    };
    // This process's CPU per delivery in the phase: the store's JavaScript and ioredis.
    const nodeUs = (u: NodeJS.CpuUsage) => +((u.user + u.system) / N).toFixed(1);
    const summary = {
      n: N,
      batch: BATCH,
      append: pick(phases.append),
      claim: { ...pick(phases.claim), nodeCpuUs: nodeUs(claimNode) },
      ackMany: { ...pick(phases.ackMany), nodeCpuUs: nodeUs(ackNode) },
    };
    console.log(JSON.stringify({ phases }));
    console.log(`REDIS_COST ${JSON.stringify(summary)}`);
  } finally {
    await deleteRedisKeys(`{${PREFIX}}*`);
    client.disconnect();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
