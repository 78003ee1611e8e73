/*
 * Redis store: Node CPU of encoding one `ackMany` call, store and ioredis, without a server (run
 * 23). A stand-in client builds each command as ioredis does for the socket (`Command`,
 * `stringifyArguments`, `toWritable`, then the bytes, which flattens the text) and answers "none
 * refused". 250 leases of one owner and token per call (a claim's acks), 400 calls per
 * measurement, 20 measurements per build, interleaved; prints the median ns and the bytes per lease.
 *
 *   node -r ../node_modules/ts-node/register/transpile-only src/redis-ack-encode.ts .lib-base/lib lib
 */
import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';

const Command = require('ioredis/built/Command').default;

const builds = process.argv.slice(2);
if (builds.length === 0) builds.push('lib');
let bytes = 0;
const client = {
  evalsha(...args: unknown[]) {
    const command = new Command('evalsha', args);
    command.stringifyArguments();
    bytes += Buffer.byteLength(command.toWritable());
    return Promise.resolve([]);
  },
  eval(): Promise<unknown> {
    throw new Error('not used');
  },
  quit: async () => 'OK',
  disconnect: () => undefined,
};
interface AckStore {
  ackMany(leases: unknown[]): Promise<string[]>;
}
const stores: AckStore[] = builds.map((lib) => {
  // As src/lib.ts resolves BENCH_LIB: `lib` is the repository's, anything else is under bench/.
  const root = lib === 'lib' ? '../../lib' : resolve(__dirname, '..', lib);
  const { RedisOutboxStore } = require(`${root}/stores/redis`);
  return new RedisOutboxStore({ client });
});
const owner = `worker-${randomUUID()}`;
const token = randomUUID();
const leaseUntil = new Date();
const leases = Array.from({ length: 250 }, () => ({
  deliveryId: randomUUID(),
  owner,
  token,
  leaseUntil,
}));

async function measure(store: AckStore, calls: number): Promise<[number, number]> {
  bytes = 0;
  const t0 = process.cpuUsage();
  for (let i = 0; i < calls; i++) await store.ackMany(leases);
  const t = process.cpuUsage(t0);
  return [((t.user + t.system) * 1000) / calls / leases.length, bytes / calls / leases.length];
}

async function main(): Promise<void> {
  const ns: number[][] = builds.map(() => []);
  const perLease: number[] = builds.map(() => 0);
  for (let round = 0; round < 20; round++) {
    const order = builds.map((_, i) => i);
    if (round % 2) order.reverse();
    for (const i of order) {
      const [n, b] = await measure(stores[i], 400);
      ns[i].push(n);
      perLease[i] = b;
    }
  }
  const median = (a: number[]) => [...a].sort((x, y) => x - y)[a.length >> 1];
  builds.forEach((lib, i) => {
    const lower =
      i === 0
        ? ''
        : `, lower than ${builds[0]} in ${ns[i].filter((v, r) => v < ns[0][r]).length} of 20`;
    console.log(
      `${lib}: ${median(ns[i]).toFixed(0)} ns per lease (median of 20), ${perLease[i].toFixed(1)} bytes per lease${lower}`,
    );
  });
}

void main();
