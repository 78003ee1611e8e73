/*
 * What the garbage collector did during a drain: the scavenges of a `node --trace-gc-nvp` log
 * inside the drain's window (the `BENCH_DRAIN_WINDOW_MS` line `dispatch.ts` prints on stderr with
 * BENCH_DRAIN_WINDOW=1; V8 stamps its trace lines in ms since the isolate started, as
 * `performance.now()` counts them, within a few ms), and the drain's BENCH_RESULT line. Per log:
 * scavenges, MB allocated between two, MB surviving each (copied within the young generation +
 * promoted to the old one) and that share of what was allocated, scavenge pause per event, and
 * full collections.
 *
 *   BENCH_DRAIN_WINDOW=1 node --trace-gc-nvp -r ../node_modules/ts-node/register/transpile-only \
 *     src/dispatch.ts ours-redis-defaults > gc.log 2>&1
 *   node -r ../node_modules/ts-node/register/transpile-only src/gc-survival.ts gc.log [more.log …]
 */
import { readFileSync } from 'node:fs';

const MB = 1e6;

for (const file of process.argv.slice(2)) {
  const lines = readFileSync(file, 'utf8').split('\n');
  const window = lines.find((l) => l.startsWith('BENCH_DRAIN_WINDOW_MS '));
  const result = lines.find((l) => l.startsWith('BENCH_RESULT '));
  if (!window || !result) {
    console.log(`${file}: no BENCH_DRAIN_WINDOW_MS or BENCH_RESULT line (BENCH_DRAIN_WINDOW=1?)`);
    continue;
  }
  const [start, end] = window.split(' ').slice(1).map(Number);
  const r = JSON.parse(result.slice('BENCH_RESULT '.length)) as {
    n: number;
    eventsPerSec: number;
    nodeCpuMsPer1000: number;
  };
  let scavenges = 0;
  let allocated = 0;
  let copied = 0;
  let promoted = 0;
  let pause = 0;
  let full = 0;
  let fullPause = 0;
  for (const line of lines) {
    const m = / (\d+) ms: pause=([\d.]+) .*gc=(\w+)/.exec(line);
    if (!m || Number(m[1]) < start || Number(m[1]) > end) continue;
    const field = (name: string) => Number(new RegExp(` ${name}=(\\d+)`).exec(line)?.[1] ?? 0);
    if (m[3] === 's') {
      scavenges++;
      allocated += field('allocated');
      copied += field('new_space_survived');
      promoted += field('promoted');
      pause += Number(m[2]);
    } else {
      full++;
      fullPause += Number(m[2]);
    }
  }
  const per = (x: number) => (scavenges ? x / scavenges / MB : 0).toFixed(2);
  console.log(
    [
      `${file}: ${Math.round(r.eventsPerSec)} events/s, Node CPU ${r.nodeCpuMsPer1000} µs/event`,
      `${scavenges} scavenges: ${per(allocated)} MB allocated between two, ${per(copied + promoted)} MB surviving each (${per(copied)} copied + ${per(promoted)} promoted, ${allocated ? ((100 * (copied + promoted)) / allocated).toFixed(0) : 0} % of allocated)`,
      `scavenge pause ${((pause * 1000) / r.n).toFixed(1)} µs/event`,
      `${full} full collections (${fullPause.toFixed(0)} ms)`,
    ].join('; '),
  );
}
