import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

/**
 * The peer ranges in package.json are what the Install table of docs/install.md states, and every major a
 * range names is installed here (the newest as itself, older ones through npm aliases such as
 * `"typeorm03": "npm:typeorm@^0.3.20"`), so the suites run on each.
 */
const root = resolve(__dirname, '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  peerDependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};

/** Enough of semver for the ranges used here: `^x.y.z` and `>=x.y.z`, joined by `||`. */
function satisfies(version: string, range: string): boolean {
  const parse = (v: string) => v.split('.').map(Number);
  const [major, minor, patch] = parse(version);
  return range.split('||').some((part) => {
    const alt = part.trim();
    const [lMajor, lMinor = 0, lPatch = 0] = parse(alt.replace(/^(\^|>=)/, ''));
    const atLeast =
      major !== lMajor ? major > lMajor : minor !== lMinor ? minor > lMinor : patch >= lPatch;
    if (alt.startsWith('>=')) return atLeast;
    if (lMajor > 0) return atLeast && major === lMajor;
    return atLeast && major === 0 && minor === lMinor;
  });
}

function installedVersion(dir: string): string {
  const manifest = JSON.parse(
    readFileSync(join(root, 'node_modules', dir, 'package.json'), 'utf8'),
  ) as { version: string };
  return manifest.version;
}

/**
 * NestJS 12 is ESM-only: it cannot sit in the root install next to 11 (Jest loads neither through
 * the other's registry), so `test/fit/nest12` declares it in a package.json of its own, which
 * test/fit/nest12.spec.ts installs and runs an app on. Its lowest declared version stands for it.
 */
const fit = JSON.parse(
  readFileSync(join(root, 'test', 'fit', 'nest12', 'package.json'), 'utf8'),
) as {
  dependencies: Record<string, string>;
};

/** Installed copies of a package: itself, its npm aliases, and its NestJS 12 fit version. */
function copiesOf(name: string): string[] {
  const aliases = Object.entries(pkg.devDependencies)
    .filter(([, spec]) => spec.startsWith(`npm:${name}@`))
    .map(([alias]) => alias);
  const inFit = fit.dependencies[name]?.replace(/^\^/, '');
  return [...[name, ...aliases].map(installedVersion), ...(inFit ? [inFit] : [])];
}

describe('peer dependency ranges', () => {
  it('satisfies() reads the ranges as npm does', () => {
    expect(satisfies('0.3.31', '^0.3.20 || ^1.0.0')).toBe(true);
    expect(satisfies('0.3.19', '^0.3.20 || ^1.0.0')).toBe(false);
    expect(satisfies('0.4.0', '^0.3.20 || ^1.0.0')).toBe(false);
    expect(satisfies('1.1.1', '^0.3.20 || ^1.0.0')).toBe(true);
    expect(satisfies('2.0.0', '^0.3.20 || ^1.0.0')).toBe(false);
    expect(satisfies('30.5.2', '>=29')).toBe(true);
  });

  it('accepts NestJS 11 and 12', () => {
    for (const name of [
      '@nestjs/common',
      '@nestjs/core',
      '@nestjs/typeorm',
      '@nestjs/microservices',
    ])
      expect([name, pkg.peerDependencies[name]]).toEqual([name, '^11.0.0 || ^12.0.0']);
    expect(pkg.peerDependencies['@nestjs/schedule']).toBe('^6.0.0 || ^12.0.0');
  });

  it('accepts typeorm 0.3 and 1, and class-validator 0.14 and 0.15', () => {
    expect(pkg.peerDependencies.typeorm).toBe('^0.3.20 || ^1.0.0');
    expect(pkg.peerDependencies['class-validator']).toBe('^0.14.0 || ^0.15.0');
  });

  it.each(Object.entries(pkg.peerDependencies))(
    '%s: every installed copy satisfies %s, and each alternative of the range is installed',
    (name, range) => {
      const versions = copiesOf(name);
      for (const version of versions)
        expect([version, satisfies(version, range)]).toEqual([version, true]);
      for (const alternative of range.split('||')) {
        expect([alternative.trim(), versions.some((v) => satisfies(v, alternative))]).toEqual([
          alternative.trim(),
          true,
        ]);
      }
    },
  );

  it('the Install table of docs/install.md states every peer with its range', () => {
    const install = readFileSync(join(root, 'docs', 'install.md'), 'utf8');
    const rows = new Map(
      [...install.matchAll(/^\| `([^`]+)` +\| `([^`]+)` +\|/gm)].map((m) => [
        m[1],
        m[2].replace(/\\\|/g, '|'),
      ]),
    );
    expect(Object.fromEntries(rows)).toEqual(pkg.peerDependencies);
  });
});
