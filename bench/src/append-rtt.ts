/*
 * Where an append's time goes (issue 9, append target): in one open transaction, N business
 * INSERTs each followed by either a hand-rolled outbox INSERT (`hand`) or `OutboxService.append`
 * (`ours`), alternating the two modes. Per mode it prints µs per iteration, this process's CPU
 * (user / system) per iteration and the median round trip of each statement kind as `pg` sees it
 * (from `client.query` to its result: server work plus both sides' scheduling). What is left of
 * an iteration after the round trips is Node-side work outside the driver's query call.
 *
 *   BENCH_PGDATABASE=<db> [N=5000] [MODES=hand,ours,…] [PER_TX=1] [WAKEUPS=0] \
 *     node -r ../node_modules/ts-node/register/transpile-only src/append-rtt.ts
 */
import { randomUUID } from 'node:crypto';
import { insertHandrolled, insertOrder, orderPayload, resetBusinessTables } from './business';
import { dropOutboxTables, openDataSource } from './common';
import { createOurApp, EVENT_TYPE } from './ours';

const N = Number(process.env.N ?? 5000);
const MODES = (process.env.MODES ?? 'hand,ours,hand,ours,hand,ours').split(',');
/** PER_TX=1: a transaction per iteration (BEGIN; business; outbox; COMMIT), as in `append-tx`. */
const PER_TX = process.env.PER_TX === '1';

// The `pg` TypeORM loads (the root's), not bench/node_modules' copy (pg-boss's).
const { Client } = require(require.resolve('pg', { paths: [require.resolve('typeorm')] })) as {
  Client: { prototype: { query: (...a: unknown[]) => unknown } };
};
const timings = new Map<string, number[]>();
const query = Client.prototype.query;
Client.prototype.query = function (this: unknown, ...args: unknown[]) {
  const t0 = process.hrtime.bigint();
  const cfg = args[0] as string | { text: string };
  const text = typeof cfg === 'string' ? cfg : cfg.text;
  const kind = /INSERT INTO "?(\w+)/.exec(text)?.[1] ?? text.slice(0, 20);
  const result = query.apply(this, args) as Promise<unknown> | undefined;
  result?.then?.(
    () => {
      const list = timings.get(kind) ?? [];
      list.push(Number(process.hrtime.bigint() - t0) / 1000);
      timings.set(kind, list);
    },
    () => undefined,
  );
  return result;
};

const median = (a: number[]) => [...a].sort((x, y) => x - y)[a.length >> 1];

void (async () => {
  const ds = await openDataSource('postgres');
  await resetBusinessTables(ds);
  await dropOutboxTables(ds);
  // WAKEUPS=0: the app without wake-ups (no NOTIFY after commits).
  const ours = await createOurApp(
    { kind: 'typeorm', dataSource: ds },
    { enabled: false, wakeups: process.env.WAKEUPS !== '0' },
  );
  for (const mode of MODES) {
    timings.clear();
    const qr = ds.createQueryRunner();
    await qr.connect();
    if (!PER_TX) await qr.startTransaction();
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    for (let i = 0; i < N; i++) {
      const id = randomUUID();
      const payload = orderPayload(id, i);
      if (PER_TX) await qr.startTransaction();
      await insertOrder(qr, id, i);
      if (mode === 'hand') {
        await insertHandrolled(qr, EVENT_TYPE, id, payload);
      } else {
        await ours.outbox.append({ type: EVENT_TYPE, key: id, payload }, { manager: qr.manager });
      }
      if (PER_TX) await qr.commitTransaction();
    }
    const us = ((performance.now() - t0) * 1000) / N;
    const cpu = process.cpuUsage(cpu0);
    if (!PER_TX) await qr.rollbackTransaction();
    await qr.release();
    const rtts = [...timings]
      .filter(([, list]) => list.length >= N / 2)
      .map(([kind, list]) => `${kind} ${median(list).toFixed(0)}`)
      .join(', ');
    console.log(
      `${mode}: ${us.toFixed(0)} µs/iteration; CPU user ${(cpu.user / N).toFixed(1)}, system ${(cpu.system / N).toFixed(1)} µs; round trips (median µs): ${rtts}`,
    );
  }
  await ours.close();
  await ds.destroy();
})();
