import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

/**
 * docs/testing.md says what `npm test` needs: every environment variable the tests read to find a
 * server is in its table, and the table names none they do not read.
 */
it("docs/testing.md's npm test table lists exactly the server variables the tests read", () => {
  const root = resolve(__dirname, '..');
  const read = (file: string) => readFileSync(join(root, file), 'utf8');
  const used = new Set(
    ['test/support/services.ts', 'test/stores/typeorm/typeorm-test-helpers.ts']
      .flatMap((file) => [...read(file).matchAll(/process\.env\.([A-Z_]+)/g)].map((m) => m[1]))
      .filter((name) => /^(PG|MYSQL_|REDIS_)/.test(name)),
  );
  const guide = read('docs/testing.md');
  const start = guide.indexOf('What `npm test` talks to');
  expect(start).toBeGreaterThan(-1);
  const next = guide.indexOf('\n## ', start);
  const section = guide.slice(start, next === -1 ? undefined : next);
  const documented = new Set([...section.matchAll(/`([A-Z][A-Z_]+)`/g)].map((m) => m[1]));
  expect([...documented].sort()).toEqual([...used].sort());
});
