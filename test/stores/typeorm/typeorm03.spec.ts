import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * typeorm 0.3 next to the installed 1.x, through the npm alias `"typeorm03": "npm:typeorm@^0.3.20"`.
 * Every `require('typeorm')` made in this file's module registry (the library's, @nestjs/typeorm's
 * and the test helpers') gets 0.3, as in an app that has 0.3 installed, and the store contract and
 * the inbox suites run unchanged on it. Without the alias this file is skipped.
 */
jest.mock('typeorm', () => jest.requireActual('typeorm03'));

function typeorm03Version(): string | null {
  try {
    const pkg = join(dirname(require.resolve('typeorm03')), 'package.json');
    const { version } = JSON.parse(readFileSync(pkg, 'utf8')) as { version: string };
    return version.startsWith('0.3.') ? version : null;
  } catch {
    return null;
  }
}

const version = typeorm03Version();
const run = version ? describe : describe.skip;

run(`on typeorm ${version ?? '0.3 (not installed)'}`, () => {
  it('is the typeorm every module here loads', () => {
    expect(require('typeorm').DataSource).toBe(jest.requireActual('typeorm03').DataSource);
  });

  require('./typeorm-outbox-contract.spec');
  require('../../inbox/inbox.spec');
});
