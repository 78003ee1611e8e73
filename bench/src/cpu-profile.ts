/*
 * Sums a `node --cpu-prof` profile's samples inside a window, per file and per function: self
 * time, and inclusive time of the library's functions. Several profiles add up (one line per
 * profile: `<file.cpuprofile>:<start µs>:<end µs>`, the window `dispatch.ts` prints on stderr with
 * BENCH_DRAIN_WINDOW=1, so only the drain counts, not the fill or the bootstrap).
 *
 *   node -r ../node_modules/ts-node/register/transpile-only src/cpu-profile.ts \
 *     prof/a.cpuprofile:306664717:307513893 prof/b.cpuprofile:313012698:313973983 [top]
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

const argv = process.argv.slice(2);
const top = Number(argv.find((a) => !a.includes(':')) ?? 40);
const byId = new Map<number, ProfileNode>();
const parent = new Map<number, number>();
/** Self µs per node (node ids made unique across profiles). */
const self = new Map<number, number>();
let total = 0;
let windowUs = 0;

argv
  .filter((a) => a.includes(':'))
  .forEach((spec, n) => {
    const [file, start, end] = spec.split(':');
    const from = Number(start);
    const to = Number(end);
    windowUs += to - from;
    const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
    const offset = (n + 1) * 10_000_000;
    for (const node of p.nodes) {
      node.id += offset;
      byId.set(node.id, node);
      for (const child of node.children ?? []) parent.set(child + offset, node.id);
    }
    let t = p.startTime;
    for (let i = 0; i < p.samples.length; i++) {
      t += p.timeDeltas[i];
      if (t < from || t > to) continue;
      // A sample lasts until the next one.
      const dt = p.timeDeltas[i + 1] ?? 0;
      const id = p.samples[i] + offset;
      total += dt;
      self.set(id, (self.get(id) ?? 0) + dt);
    }
  });

const short = (url: string) =>
  url
    .replace(/^file:\/\//, '')
    .replace(/.*node_modules\//, 'nm/')
    .replace(/^\/.*?\/(lib|bench)\//, '$1/');
const nameOf = (node: ProfileNode) =>
  `${node.callFrame.functionName || '(anonymous)'} ${short(node.callFrame.url)}:${node.callFrame.lineNumber + 1}`;

const files = new Map<string, number>();
const functions = new Map<string, number>();
const inclusive = new Map<string, number>();
const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);
for (const [id, us] of self) {
  const node = byId.get(id)!;
  add(
    files,
    node.callFrame.url ? short(node.callFrame.url) : `(${node.callFrame.functionName})`,
    us,
  );
  add(functions, nameOf(node), us);
  const seen = new Set<string>();
  for (let x: number | undefined = id; x !== undefined; x = parent.get(x)) {
    const name = nameOf(byId.get(x)!);
    if (!seen.has(name)) add(inclusive, name, us);
    seen.add(name);
  }
}

const print = (title: string, m: Map<string, number>, filter = (_: string) => true) => {
  console.log(`--- ${title}`);
  [...m]
    .filter(([k]) => filter(k))
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .forEach(([k, us]) =>
      console.log(
        `${((100 * us) / total).toFixed(1).padStart(5)}% ${(us / 1000).toFixed(1).padStart(8)} ms  ${k}`,
      ),
    );
};
console.log(`window ${(windowUs / 1000).toFixed(1)} ms, sampled ${(total / 1000).toFixed(1)} ms`);
print('self time per file', files);
print('self time per function', functions);
print('inclusive time, library functions', inclusive, (k) => k.includes(' lib/'));
