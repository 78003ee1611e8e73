import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * class-validator 0.14 next to the installed 0.15, through the npm alias
 * `"class-validator014": "npm:class-validator@^0.14.0"`. Every `require('class-validator')` made in
 * this file's module registry (the admin DTOs' and Nest's ValidationPipe's) gets 0.14, and the admin
 * API suite, refusals of invalid input included, runs unchanged on it. Without the alias this file
 * is skipped.
 */
jest.mock('class-validator', () => jest.requireActual('class-validator014'));

function classValidator014Version(): string | null {
  try {
    let dir = dirname(require.resolve('class-validator014'));
    while (!dir.endsWith('class-validator014')) dir = dirname(dir);
    const { version } = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
      version: string;
    };
    return version.startsWith('0.14.') ? version : null;
  } catch {
    return null;
  }
}

const version = classValidator014Version();
const run = version ? describe : describe.skip;

run(`on class-validator ${version ?? '0.14 (not installed)'}`, () => {
  it('is the class-validator every module here loads', () => {
    expect(require('class-validator').validate).toBe(
      jest.requireActual('class-validator014').validate,
    );
  });

  require('./admin-api.memory.e2e-spec');
});
