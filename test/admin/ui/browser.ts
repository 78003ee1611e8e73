import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Browser, Page } from 'playwright-core';

/** Screenshots of each view land here (gitignored). */
export const SCREENSHOTS = resolve(__dirname, '../../../test-artifacts/ui');

/**
 * The system Chromium (Debian's `chromium` package; `.ci/run` installs it): `CHROMIUM_PATH`, else
 * `chromium` on the PATH. No browser is downloaded at install time.
 */
export function chromiumPath(): string | undefined {
  const fromEnv = process.env.CHROMIUM_PATH;
  if (fromEnv) return existsSync(fromEnv) ? fromEnv : undefined;
  for (const name of ['chromium', 'chromium-browser']) {
    try {
      const found = execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim();
      if (found) return found;
    } catch {
      // not on the PATH
    }
  }
  return undefined;
}

/**
 * `describe` for browser tests: runs when Chromium is installed; under CI=true a missing browser
 * fails the file, elsewhere the file is skipped with a loud warning.
 */
export function describeWithBrowser(title: string, body: () => void): void {
  if (chromiumPath()) {
    describe(`${title} [chromium]`, body);
    return;
  }
  if (process.env.CI === 'true') {
    describe(`${title} [chromium]`, () => {
      it('needs Chromium', () => {
        throw new Error(
          'Chromium is missing under CI=true: install the `chromium` package (.ci/run does) or set CHROMIUM_PATH',
        );
      });
    });
    return;
  }
  console.warn(
    `\n!!! SKIPPING "${title}": no Chromium found (apt-get install chromium, or set CHROMIUM_PATH). !!!\n`,
  );
  // Outside CI only (above, CI fails): the same loud skip as describeWithService.
  const skipped = describe.skip;
  skipped(`${title} [chromium]`, body);
}

export async function launchChromium(): Promise<Browser> {
  const { chromium } = await import('playwright-core');
  return chromium.launch({
    executablePath: chromiumPath(),
    headless: true,
    // Root in containers has no user namespace for Chromium's sandbox.
    args: process.getuid?.() === 0 ? ['--no-sandbox'] : [],
  });
}

/** Saves a full-page screenshot as `<SCREENSHOTS>/<name>.png`. */
export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}
