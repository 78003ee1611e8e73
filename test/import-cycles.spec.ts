import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative, resolve } from 'node:path';

/**
 * lib/ has no import cycle, type-only imports and lazy `require`s included: a module never
 * (indirectly) imports the module that loads it, so each can be read, and loaded, on its own.
 */
const lib = resolve(__dirname, '../lib');

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sources(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

function importGraph(): Map<string, string[]> {
  const files = new Set(sources(lib));
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    const deps = [...text.matchAll(/(?:from\s+|require\(\s*|import\(\s*)'(\.[^']*)'/g)]
      .map(([, spec]) => normalize(join(dirname(file), spec)))
      .map((base) => [`${base}.ts`, join(base, 'index.ts')].find((c) => files.has(c)))
      .filter((dep): dep is string => dep !== undefined);
    graph.set(file, [...new Set(deps)]);
  }
  return graph;
}

/** Each cycle once, as the files along it. */
function cycles(graph: Map<string, string[]>): string[][] {
  const found: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (file: string): void => {
    state.set(file, 'open');
    path.push(file);
    for (const dep of graph.get(file) ?? []) {
      if (state.get(dep) === 'open') found.push(path.slice(path.indexOf(dep)));
      else if (!state.has(dep)) visit(dep);
    }
    path.pop();
    state.set(file, 'done');
  };
  for (const file of graph.keys()) if (!state.has(file)) visit(file);
  return found;
}

describe('lib/ import graph', () => {
  it('reads the imports of every module', () => {
    const graph = importGraph();
    expect(graph.size).toBeGreaterThan(100);
    expect(graph.get(join(lib, 'stores/store.factory.ts'))).toContain(
      join(lib, 'stores/store-factory-context.ts'),
    );
  });

  it('has no cycle', () => {
    const found = cycles(importGraph()).map((cycle) =>
      cycle.map((file) => relative(lib, file)).join(' -> '),
    );
    expect(found).toEqual([]);
  });
});
