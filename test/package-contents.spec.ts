import { execFileSync } from 'node:child_process';
import { copyFileSync, cpSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { INBOX_SCHEMA_VERSION } from '../lib/inbox/inbox.store';
import { OUTBOX_SCHEMA_VERSION } from '../lib/stores/typeorm/internal';

/**
 * What `npm publish` would ship, as a user checks it before adopting: the build, README, LICENSE
 * and CHANGELOG, nothing of the tests or sources, and source maps that carry their sources. The
 * package is built here from lib/ (`tsconfig.build.json`, as `npm run build` does) into a temp
 * directory and listed with `npm pack --dry-run`.
 */
const root = resolve(__dirname, '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  license: string;
  main: string;
  types: string;
  bin: Record<string, string>;
  exports: Record<string, { types?: string; default?: string } | string>;
};

describe('the published package', () => {
  jest.setTimeout(240_000);
  let dir: string;
  let files: string[];

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'outbox-pack-'));
    for (const file of ['package.json', 'README.md', 'LICENSE', 'CHANGELOG.md']) {
      copyFileSync(join(root, file), join(dir, file));
    }
    execFileSync(
      process.execPath,
      [
        require.resolve('typescript/bin/tsc'),
        '-p',
        'tsconfig.build.json',
        '--outDir',
        join(dir, 'dist'),
      ],
      { cwd: root, stdio: 'pipe' },
    );
    cpSync(join(root, 'lib/admin/ui/assets'), join(dir, 'dist/admin/ui/assets'), {
      recursive: true,
    });
    cpSync(join(root, 'lib/stores/redis/lua'), join(dir, 'dist/stores/redis/lua'), {
      recursive: true,
    });
    const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
      cwd: dir,
      encoding: 'utf8',
    });
    files = (JSON.parse(out) as [{ files: { path: string }[] }])[0].files.map((f) => f.path);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('ships the build, README, LICENSE, CHANGELOG and package.json only', () => {
    const outside = files.filter((f) => !f.startsWith('dist/'));
    expect(outside.sort()).toEqual(['CHANGELOG.md', 'LICENSE', 'README.md', 'package.json']);
    expect(
      files.filter((f) => /(^|\/)(test|fixtures|__tests__)\/|\.spec\.|\.ts$(?<!\.d\.ts)/.test(f)),
    ).toEqual([]);
    expect(files.some((f) => f.startsWith('dist/admin/ui/assets/'))).toBe(true);
  });

  it('ships the Lua of the Redis store, which the built scripts module reads', () => {
    const lua = readdirSync(join(root, 'lib/stores/redis/lua')).filter((f) => f.endsWith('.lua'));
    expect(lua.length).toBeGreaterThan(0);
    for (const file of lua) expect(files).toContain(`dist/stores/redis/lua/${file}`);
    const built = require(join(dir, 'dist/stores/redis/redis-scripts')) as {
      REDIS_SCRIPTS: Record<string, string>;
    };
    expect(Object.keys(built.REDIS_SCRIPTS)).toContain('claim');
  });

  it('holds every file package.json points at', () => {
    const targets = [pkg.main, pkg.types, ...Object.values(pkg.bin)];
    for (const entry of Object.values(pkg.exports)) {
      if (typeof entry === 'string') targets.push(entry);
      else targets.push(...[entry.types, entry.default].filter((t): t is string => !!t));
    }
    for (const target of targets.filter((t) => !t.endsWith('package.json'))) {
      expect(files).toContain(target.replace(/^\.\//, ''));
    }
  });

  it('has source maps that carry their sources (lib/ is not shipped)', () => {
    const maps = files.filter((f) => f.endsWith('.js.map'));
    expect(maps.length).toBeGreaterThan(0);
    for (const map of maps) {
      const parsed = JSON.parse(readFileSync(join(dir, map), 'utf8')) as {
        sources: string[];
        sourcesContent?: (string | null)[];
      };
      expect({ map, ok: parsed.sourcesContent?.length === parsed.sources.length }).toEqual({
        map,
        ok: true,
      });
      expect(parsed.sourcesContent!.every((s) => typeof s === 'string' && s.length > 0)).toBe(true);
    }
  });

  it('LICENSE matches package.json, and CHANGELOG names the schema versions this release needs', () => {
    expect(pkg.license).toBe('MIT');
    expect(readFileSync(join(root, 'LICENSE'), 'utf8')).toMatch(/^MIT License/);
    const changelog = readFileSync(join(root, 'CHANGELOG.md'), 'utf8');
    expect(changelog).toMatch(
      new RegExp(`\\| outbox \\(SQL stores\\) \\| \\*\\*${OUTBOX_SCHEMA_VERSION}\\*\\*`),
    );
    expect(changelog).toMatch(new RegExp(`\\| inbox \\| \\*\\*${INBOX_SCHEMA_VERSION}\\*\\*`));
  });
});
