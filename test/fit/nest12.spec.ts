import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { TS_REGISTER } from '../support/child-process';

/**
 * The library on NestJS 12, which is ESM-only. Jest's module registry cannot load ESM packages
 * through `require`, so the app (fixture `nest12/app.ts`) runs in a plain Node process, where
 * Node 20.19+ loads NestJS 12 through require(esm). NestJS 12 lives in `test/fit/nest12` (its
 * own package.json and lock, installed here with `npm ci` on first use); `nest12-resolve.js`
 * points every `@nestjs/…` require of the library at it.
 */
const ROOT = resolve(__dirname, '..', '..');
const DIR = join(__dirname, 'nest12');
const ON_CI = process.env.CI === 'true';

function installedNest(): string | null {
  const manifest = join(DIR, 'node_modules', '@nestjs', 'core', 'package.json');
  if (!existsSync(manifest)) return null;
  return (JSON.parse(readFileSync(manifest, 'utf8')) as { version: string }).version;
}

/** Installs NestJS 12 from the lock when missing; the reason it could not, otherwise. */
function ensureNest12(): string | null {
  if (installedNest()?.startsWith('12.')) return null;
  const npm = spawnSync('npm', ['ci', '--omit=peer', '--no-audit', '--no-fund'], {
    cwd: DIR,
    encoding: 'utf8',
    timeout: 300_000,
  });
  if (npm.status === 0 && installedNest()?.startsWith('12.')) return null;
  return `npm ci in ${DIR} failed (${npm.error?.message ?? `exit ${npm.status}`}): ${npm.stderr?.slice(-500)}`;
}

/** require(esm) is on by default from Node 20.19 and 22.12. */
function nodeLoadsEsmThroughRequire(): boolean {
  const [major, minor] = process.versions.node.split('.').map(Number);
  return major > 22 || (major === 22 && minor >= 12) || (major === 20 && minor >= 19);
}

describe('on NestJS 12 (ESM-only), in a child process', () => {
  let problem: string | null = null;

  beforeAll(() => {
    problem = nodeLoadsEsmThroughRequire()
      ? ensureNest12()
      : `Node ${process.versions.node} cannot require() ESM (needs 20.19+ or 22.12+)`;
    if (problem && ON_CI)
      throw new Error(`NestJS 12 fit test cannot run under CI=true: ${problem}`);
    if (problem) console.warn(`\n\n*** SKIPPING the NestJS 12 test: ${problem} ***\n`);
  }, 320_000);

  it('bootstraps, dispatches, retries, keeps a rolled-back event out, and serves @Inbox() (HTTP, TCP), admin routes and health', () => {
    if (problem) return;
    const out = execFileSync(
      process.execPath,
      ['-r', TS_REGISTER, '-r', join(DIR, 'nest12-resolve.js'), join(DIR, 'app.ts')],
      {
        cwd: ROOT,
        encoding: 'utf8',
        timeout: 60_000,
        env: { ...process.env, TS_NODE_PROJECT: 'tsconfig.json' },
      },
    );
    const seen = JSON.parse(out.trim().split('\n').pop()!);
    expect(seen).toEqual({
      nest: expect.stringMatching(/^12\./),
      nest11Loaded: [],
      handled: [1, 2, 3], // 3 failed once and was retried; 99 was rolled back
      streamed: 3, // outbox.delivered through @nestjs/event-emitter 12
      http: [
        { status: 201, body: { status: 'captured' } },
        { status: 201, body: { status: 'duplicate' } },
      ],
      rpc: [{ status: 'scheduled' }, { status: 'duplicate' }],
      payments: 1,
      shipments: 1,
      stats: [403, 200], // the admin routes behind the app's guard
      health: 'ok',
    });
  }, 90_000);
});
