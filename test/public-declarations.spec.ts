import { execFileSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import type { ClientProvider } from '@nestjs/microservices';
import type { OutboxRelayClientOptions } from 'nestjs-outbox';

/**
 * The published declarations (`dist/index.d.ts` and what it reaches) compile for an app that
 * installed only the required peers, with `skipLibCheck: false`: no optional peer's types are
 * needed, except typeorm's (docs/install.md says so: `InboxManager`,
 * `ensureOutboxSchema` and the migrations are typed with typeorm's `EntityManager`, `DataSource`
 * and `MigrationInterface`).
 *
 * The app is a temp directory whose node_modules holds the declarations emitted from lib/ as the
 * package `nestjs-outbox` and links to the required peers and their own dependencies, nothing
 * else; `preserveSymlinks` keeps tsc from following the links back into this repo's node_modules.
 */
const root = resolve(__dirname, '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  peerDependencies: Record<string, string>;
  peerDependenciesMeta: Record<string, { optional?: boolean }>;
};

const REQUIRED_PEERS = Object.keys(pkg.peerDependencies).filter(
  (name) => !pkg.peerDependenciesMeta[name]?.optional,
);

/**
 * Optional peers the declarations still reach, each with where and why. Empty is the goal: an
 * entry here is a defect to fix (the test fails when the list is stale in either direction).
 */
const PENDING: Record<string, string> = {};

/** `name` plus everything npm would install with it: dependencies and required peers, transitively. */
function closure(names: string[]): Set<string> {
  const found = new Set<string>();
  const visit = (name: string) => {
    if (found.has(name)) return;
    const manifestPath = join(root, 'node_modules', name, 'package.json');
    // Not hoisted: a nested copy, which comes along with its parent's link.
    if (!existsSync(manifestPath)) return;
    found.add(name);
    const manifest = JSON.parse(readFileSync(manifestPath, 'utf8')) as {
      dependencies?: Record<string, string>;
      peerDependencies?: Record<string, string>;
      peerDependenciesMeta?: Record<string, { optional?: boolean }>;
    };
    for (const dep of Object.keys(manifest.dependencies ?? {})) visit(dep);
    for (const peer of Object.keys(manifest.peerDependencies ?? {}))
      if (!manifest.peerDependenciesMeta?.[peer]?.optional) visit(peer);
  };
  names.forEach(visit);
  return found;
}

/** Emits lib's declarations once, as the package `nestjs-outbox` would ship them. */
function emitDeclarations(into: string): void {
  execFileSync(
    process.execPath,
    [
      join(root, 'node_modules', 'typescript', 'bin', 'tsc'),
      ...['-p', join(root, 'tsconfig.build.json'), '--emitDeclarationOnly'],
      ...[
        '--declarationMap',
        'false',
        '--sourceMap',
        'false',
        '--inlineSources',
        'false',
        '--outDir',
        join(into, 'dist'),
      ],
    ],
    { cwd: root, stdio: 'pipe', timeout: 120_000 },
  );
  copyFileSync(join(root, 'package.json'), join(into, 'package.json'));
}

/** Compiles a consumer of `nestjs-outbox` in an app that installed `packages`; returns tsc's errors. */
function compileConsumer(base: string, app: string, packages: string[]): string[] {
  const modules = join(app, 'node_modules');
  mkdirSync(modules, { recursive: true });
  symlinkSync(join(base, 'nestjs-outbox'), join(modules, 'nestjs-outbox'), 'dir');
  for (const name of closure([...packages, '@types/node'])) {
    mkdirSync(dirname(join(modules, name)), { recursive: true });
    symlinkSync(join(root, 'node_modules', name), join(modules, name), 'dir');
  }
  writeFileSync(
    join(app, 'consumer.ts'),
    [
      "import 'reflect-metadata';",
      "import * as outbox from 'nestjs-outbox';",
      "import { OutboxModule, OutboxService, InboxModule, OutboxRelayModule } from 'nestjs-outbox';",
      'export const api = { outbox, OutboxModule, OutboxService, InboxModule, OutboxRelayModule };',
      '',
    ].join('\n'),
  );
  writeFileSync(
    join(app, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        module: 'commonjs',
        target: 'ES2022',
        lib: ['ES2022'],
        strict: true,
        skipLibCheck: false,
        experimentalDecorators: true,
        emitDecoratorMetadata: true,
        preserveSymlinks: true,
        noEmit: true,
        types: ['node'],
        typeRoots: [join(modules, '@types')],
      },
      files: ['consumer.ts'],
    }),
  );
  try {
    execFileSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc')], {
      cwd: app,
      encoding: 'utf8',
      stdio: 'pipe',
      timeout: 120_000,
    });
    return [];
  } catch (error) {
    const { stdout } = error as { stdout?: string };
    if (!stdout) throw error;
    return stdout.split('\n').filter((line) => /error TS\d+/.test(line));
  }
}

/** The modules tsc could not find, each with the declaration files that import it. */
function missingModules(errors: string[]): Record<string, string[]> {
  const missing: Record<string, Set<string>> = {};
  for (const line of errors) {
    const m =
      /^(?:.*\/)?nestjs-outbox\/dist\/(\S+?)\(\d+,\d+\): error TS2307: Cannot find module '([^']+)'/.exec(
        line,
      );
    if (m) (missing[m[2]] ??= new Set()).add(m[1]);
  }
  return Object.fromEntries(Object.entries(missing).map(([k, v]) => [k, [...v].sort()]));
}

describe('public declarations without the optional peers', () => {
  let base: string;

  beforeAll(() => {
    base = mkdtempSync(join(tmpdir(), 'outbox-dts-'));
    emitDeclarations(join(base, 'nestjs-outbox'));
  }, 120_000);

  afterAll(() => {
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it('the required peers are the ones the app always installs', () => {
    expect(REQUIRED_PEERS.sort()).toEqual([
      '@nestjs/common',
      '@nestjs/core',
      '@nestjs/schedule',
      'reflect-metadata',
      'rxjs',
    ]);
  });

  it('compile with skipLibCheck false given the required peers and typeorm', () => {
    const errors = compileConsumer(base, join(base, 'with-typeorm'), [
      ...REQUIRED_PEERS,
      'typeorm',
    ]);
    const missing = missingModules(errors);
    expect(Object.keys(missing).sort()).toEqual(Object.keys(PENDING).sort());
    for (const [name, file] of Object.entries(PENDING)) expect(missing[name]).toContain(file);
    // Nothing else fails: every error is a pending module's "cannot find".
    expect(
      errors.filter((line) => !Object.keys(PENDING).some((p) => line.includes(`'${p}'`))),
    ).toEqual([]);
  }, 120_000);

  it('without typeorm, only typeorm (and what is pending) is missing: the documented exception', () => {
    const errors = compileConsumer(base, join(base, 'required-only'), REQUIRED_PEERS);
    const missing = missingModules(errors);
    expect(Object.keys(missing).sort()).toEqual(['typeorm', ...Object.keys(PENDING)].sort());
  }, 120_000);

  it("the relay's client option accepts what ClientsModule takes, without naming its types", () => {
    const fromNest: OutboxRelayClientOptions = {} as ClientProvider;
    expect(fromNest).toEqual({});
  });
});
