/*
 * Node CPU per delivery of the SQL store's claim + ack, two builds of the library side by side in
 * one process (run 24): each build's store drains its own backlog (its own tables) in turns, one
 * claim of BENCH_PAIR_LIMIT then one ackMany of what it claimed, the two builds alternating claim
 * by claim, so both see the same machine state (a shared machine's load moves both alike). No
 * dispatcher, no handler: only the store's path (statement building, executor, `pg`, row mapping,
 * the ack). Prints CPU µs per delivery per build, per block of claims, and the medians.
 *
 *   BENCH_PGDATABASE=<db> BENCH_PAIR=.lib-base/lib,lib node -r ../node_modules/ts-node/register/transpile-only src/store-pair.ts
 */
import { resolve } from 'node:path';
import { dropOutboxTables, envInt, openDataSource, orderEvents } from './common';

const N = envInt('BENCH_PAIR_N', 20_000);
const LIMIT = envInt('BENCH_PAIR_LIMIT', 100);
const BLOCK = envInt('BENCH_PAIR_BLOCK', 20);
const builds = (process.env.BENCH_PAIR ?? '.lib-base/lib,lib').split(',');

async function main(): Promise<void> {
  const ds = await openDataSource('postgres');
  const stores = builds.map((b, i) => {
    const root = b === 'lib' ? resolve(__dirname, '../../lib') : resolve(__dirname, '..', b);
    const { TypeOrmOutboxStore } = require(`${root}/stores/typeorm/typeorm-outbox.store`);
    return new TypeOrmOutboxStore(ds, { tablePrefix: `pair${i}_`, ensureSchema: true });
  });
  const handlers = [{ name: 'pair-handler', types: ['order.created'] }];
  try {
    for (const s of stores) {
      await s.init();
      for (let i = 0; i < N; i += 500) {
        await s.append(orderEvents(handlers[0], i, Math.min(500, N - i)));
      }
    }
    for (const s of stores)
      await s.ackMany(
        (await s.claim({ workerId: 'pair', handlers, limit: 5, leaseMs: 30_000 })).map(
          (d: any) => d.lease,
        ),
      );
    const per = builds.map(() => [] as number[]);
    const acc = builds.map(() => ({ us: 0, n: 0 }));
    /** µs per delivery of each claim + ack, per build (claim i of every build ran back to back). */
    const each = builds.map(() => [] as number[]);
    let claims = 0;
    for (let done = false; !done;) {
      done = true;
      for (let b = 0; b < stores.length; b++) {
        const c0 = process.cpuUsage();
        const claimed = await stores[b].claim({
          workerId: 'pair',
          handlers,
          limit: LIMIT,
          leaseMs: 30_000,
        });
        if (claimed.length === 0) continue;
        done = false;
        const acked = await stores[b].ackMany(claimed.map((d: any) => d.lease));
        const c = process.cpuUsage(c0);
        if (acked.length !== claimed.length) throw new Error('ack lost a lease');
        acc[b].us += c.user + c.system;
        acc[b].n += claimed.length;
        each[b].push((c.user + c.system) / claimed.length);
      }
      if (++claims % BLOCK === 0 || done) {
        acc.forEach((a, b) => {
          if (a.n) per[b].push(a.us / a.n);
          acc[b] = { us: 0, n: 0 };
        });
      }
    }
    const median = (a: number[]) => [...a].sort((x, y) => x - y)[a.length >> 1];
    builds.forEach((b, i) =>
      console.log(
        `${b.padEnd(16)} µs/delivery per block: ${per[i].map((x) => x.toFixed(1)).join(' ')}  median ${median(per[i]).toFixed(2)}`,
      ),
    );
    for (let b = 1; b < builds.length; b++) {
      const pairs = each[0].map((x, i) => each[b][i] / x).filter((r) => Number.isFinite(r));
      const sorted = [...pairs].sort((x, y) => x - y);
      const q = (f: number) => sorted[Math.floor(f * (sorted.length - 1))].toFixed(3);
      console.log(
        `${builds[b]} ÷ ${builds[0]}: median of ${pairs.length} claim-by-claim ratios ${q(0.5)} (quartiles ${q(0.25)}–${q(0.75)}); medians of claims ${median(each[0]).toFixed(2)} → ${median(each[b]).toFixed(2)} µs/delivery`,
      );
    }
  } finally {
    for (const s of stores) await s.close?.();
    for (let i = 0; i < builds.length; i++) await dropOutboxTables(ds, `pair${i}_`);
    await ds.destroy();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
