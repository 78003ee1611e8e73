import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

/**
 * The README says what `npm test` needs: every environment variable the tests read to find a
 * server is in its table, and the table names none they do not read.
 */
it("the README's npm test table lists exactly the server variables the tests read", () => {
  const root = resolve(__dirname, '..');
  const read = (file: string) => readFileSync(join(root, file), 'utf8');
  const used = new Set(
    ['test/support/services.ts', 'test/stores/typeorm/typeorm-test-helpers.ts']
      .flatMap((file) => [...read(file).matchAll(/process\.env\.([A-Z_]+)/g)].map((m) => m[1]))
      .filter((name) => /^(PG|MYSQL_|REDIS_)/.test(name)),
  );
  const readme = read('README.md');
  const section = readme.slice(
    readme.indexOf('What `npm test` talks to'),
    readme.indexOf('## Quick start'),
  );
  const documented = new Set([...section.matchAll(/`([A-Z][A-Z_]+)`/g)].map((m) => m[1]));
  expect([...documented].sort()).toEqual([...used].sort());
});
