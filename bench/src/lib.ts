/*
 * The library under test. Default: the compiled `../dist` (what users run; build it with
 * `npm run build` in the repository root, which `npm run bench` does). BENCH_LIB=lib runs the
 * TypeScript source `../lib` through ts-node instead (slower process start, same code).
 * BENCH_LIB=<path> (anything else: a directory, absolute or relative to bench/) loads the library
 * from there, e.g. another commit's `lib` extracted with `git archive` (it must sit inside this
 * repository so its imports resolve from the root's node_modules).
 * Types always come from the source, so the root typecheck needs no build.
 */
import { resolve } from 'node:path';
import type * as Lib from '../../lib';

export type { OutboxDispatcherOptions, OutboxEvent } from '../../lib';

const choice = process.env.BENCH_LIB;
export const libRoot =
  choice === 'lib' ? '../../lib' : choice ? resolve(__dirname, '..', choice) : '../../dist';
export const lib: typeof Lib = require(libRoot);

/**
 * The store classes, which the package barrel does not export (users get stores from the module
 * options); scenarios that drive a store directly take them from here.
 */
export const stores: {
  RedisOutboxStore: typeof import('../../lib/stores/redis/redis-outbox.store').RedisOutboxStore;
  TypeOrmOutboxStore: typeof import('../../lib/stores/typeorm/typeorm-outbox.store').TypeOrmOutboxStore;
} = {
  get RedisOutboxStore() {
    return require(`${libRoot}/stores/redis/redis-outbox.store`).RedisOutboxStore;
  },
  get TypeOrmOutboxStore() {
    return require(`${libRoot}/stores/typeorm/typeorm-outbox.store`).TypeOrmOutboxStore;
  },
};
