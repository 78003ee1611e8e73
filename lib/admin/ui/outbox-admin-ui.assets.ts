import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { OutboxAdminOptionsError } from '../../errors/outbox-admin-options.error';

/** A file of the dashboard, as served. */
export interface DashboardAsset {
  contentType: string;
  body: string;
}

/**
 * The page allows scripts and styles from its own origin only: no inline script, no inline
 * style, no `eval`, no other host (the page works offline), and no framing, forms or <base>.
 */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** Headers of every dashboard file, on top of `Cache-Control: no-store` set by the auth guard. */
export const DASHBOARD_HEADERS: Readonly<Record<string, string>> = {
  'Content-Security-Policy': DASHBOARD_CSP,
  'Cache-Control': 'no-store',
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'no-referrer',
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Resource-Policy': 'same-origin',
};

/** Files under `ui/`, by the name in the URL. The page itself is `dashboard.html`. */
const FILES: Readonly<Record<string, string>> = {
  'dashboard.html': 'text/html; charset=utf-8',
  'dashboard.css': 'text/css; charset=utf-8',
  'dashboard.js': 'text/javascript; charset=utf-8',
  // Linked from the page, so the browser asks for it instead of a /favicon.ico the app lacks.
  'favicon.svg': 'image/svg+xml; charset=utf-8',
};

/**
 * Plain files shipped next to this module (`npm run build` copies `assets/` into `dist`), all read
 * when the module starts, so a package missing one fails bootstrap rather than a page load. No
 * bundler, no CDN: what is in the package is what the browser runs.
 */
export class DashboardAssets {
  private readonly files = new Map<string, DashboardAsset>();

  constructor(dir = join(__dirname, 'assets')) {
    for (const [name, contentType] of Object.entries(FILES)) {
      let body: string;
      try {
        body = readFileSync(join(dir, name), 'utf8');
      } catch (error) {
        throw new OutboxAdminOptionsError(
          'ui',
          `the dashboard file ${join(dir, name)} cannot be read (${(error as Error).message}); ` +
            'the installed package is incomplete: reinstall nestjs-outbox',
        );
      }
      this.files.set(name, { contentType, body });
    }
  }

  /** The file named `name`, or undefined for any name that is not one of the dashboard's. */
  get(name: string): DashboardAsset | undefined {
    return this.files.get(name);
  }
}
