/*
 * The library under test. Default: the compiled `../dist` (what users run; build it with
 * `npm run build` in the repository root, which `npm run bench` does). BENCH_LIB=lib runs the
 * TypeScript source `../lib` through ts-node instead (slower process start, same code).
 * Types always come from the source, so the root typecheck needs no build.
 */
import type * as Lib from '../../lib';

export type { OutboxDispatcherOptions, OutboxEvent } from '../../lib';

export const lib: typeof Lib = require(
  process.env.BENCH_LIB === 'lib' ? '../../lib' : '../../dist',
);
