import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { INestApplication, Injectable, Type } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import type { Browser } from 'playwright-core';
import {
  NonRetryableError,
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxService,
  OUTBOX_STORE,
  OutboxStore,
} from 'nestjs-outbox';
import { describeWithBrowser, launchChromium, screenshot } from './browser';

const root = resolve(__dirname, '../../..');

/** The "Dashboard" snippet of docs/admin.md, run as written: written to a file and required. */
function loadReadmeSnippet(): { DashboardAppModule: Type; dir: string } {
  const guide = readFileSync(join(root, 'docs', 'admin.md'), 'utf8');
  const snippet = [...guide.matchAll(/```ts\n([\s\S]*?)```/g)]
    .map((m) => m[1])
    .find((code) => code.includes('class AdminKeyOrSessionGuard'));
  if (!snippet) throw new Error('docs/admin.md has no AdminKeyOrSessionGuard snippet');
  const dir = mkdtempSync(join(root, 'test', '.readme-ui-'));
  writeFileSync(join(dir, 'dashboard-snippet.ts'), snippet);
  const loaded = require(join(dir, 'dashboard-snippet.ts')) as { DashboardAppModule: Type };
  return { ...loaded, dir };
}

@Injectable()
class Mailer {
  failing = true;
  readonly sent: string[] = [];
  @OutboxHandler('mail.requested')
  send(event: OutboxEvent<{ to: string }>): void {
    if (this.failing) throw new NonRetryableError(`no route to ${event.payload.to}`);
    this.sent.push(event.payload.to);
  }
}

describeWithBrowser('Dashboard behind the sign-in form and session guard of docs/admin.md', () => {
  const KEY = 'readme-dashboard-key';
  let app: INestApplication;
  let url: string;
  let browser: Browser;
  let dir: string | undefined;

  beforeAll(async () => {
    process.env.OUTBOX_ADMIN_KEY = KEY;
    const snippet = loadReadmeSnippet();
    dir = snippet.dir;
    const moduleRef = await Test.createTestingModule({
      imports: [snippet.DashboardAppModule],
      providers: [Mailer],
    }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    await app
      .get(OutboxService)
      .append({ type: 'mail.requested', payload: { to: 'ada@example.test' } });
    await app.get(OutboxDispatcher).drain();
    browser = await launchChromium();
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await app?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
    delete process.env.OUTBOX_ADMIN_KEY;
  });

  it('a plain browser signs in through the form and uses the page, replays included', async () => {
    const context = await browser.newContext({ timezoneId: 'UTC' });
    context.setDefaultTimeout(10_000);
    try {
      const page = await context.newPage();
      expect((await page.goto(`${url}/outbox/ui`))?.status()).toBe(403);
      await page.goto(`${url}/admin/sign-in`);
      await page.locator('input[name=key]').fill('wrong');
      await page.locator('button[type=submit]').click();
      await page.locator('[role=alert]').waitFor();
      await page.locator('input[name=key]').fill(KEY);
      await Promise.all([
        page.waitForURL(`${url}/outbox/ui`),
        page.locator('button[type=submit]').click(),
      ]);
      const session = (await context.cookies()).find((c) => c.name === 'outbox_session');
      expect(session).toMatchObject({ httpOnly: true, sameSite: 'Strict', secure: false });
      await page.goto(`${url}/outbox/ui#/dead-letters`);
      const row = page.locator('#dead-letters tbody tr');
      await row.first().waitFor();
      expect(await row.count()).toBe(1);
      expect(await row.first().innerText()).toContain('no route to ada@example.test');
      await screenshot(page, 'cookie-guard-list');
      app.get(Mailer).failing = false;
      await row.first().locator('input[type=checkbox]').check();
      await page.locator('#replay-selected').click();
      await page.locator('#confirm-ok').click();
      await page.locator('#notice').filter({ hasText: 'Replayed 1 dead letter.' }).waitFor();
      await app.get(OutboxDispatcher).drain();
      expect(app.get(Mailer).sent).toEqual(['ada@example.test']);
      expect((await app.get<OutboxStore>(OUTBOX_STORE).stats()).dead).toBe(0);
    } finally {
      await context.close();
    }
  });

  it('refuses a sign-in whose form token is missing or that comes from another origin', async () => {
    const context = await browser.newContext();
    try {
      const forged = await context.request.post(`${url}/admin/sign-in`, {
        form: { key: KEY, csrf: 'guessed' },
        maxRedirects: 0,
      });
      expect(forged.status()).toBe(403);
      const page = await context.newPage();
      await page.goto(`${url}/admin/sign-in`);
      const csrf = await page.locator('input[name=csrf]').inputValue();
      const crossSite = await context.request.post(`${url}/admin/sign-in`, {
        form: { key: KEY, csrf },
        headers: { origin: 'https://evil.example' },
        maxRedirects: 0,
      });
      expect(crossSite.status()).toBe(403);
      expect((await context.cookies()).map((c) => c.name)).not.toContain('outbox_session');
    } finally {
      await context.close();
    }
  });

  it('is refused without a session, or with a made-up one; the proxy header works too', async () => {
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      expect((await page.goto(`${url}/outbox/ui`))?.status()).toBe(403);
      await context.addCookies([{ name: 'outbox_session', value: 'nope', url }]);
      expect((await page.goto(`${url}/outbox/ui`))?.status()).toBe(403);
      const viaProxy = await context.request.get(`${url}/outbox/ui`, {
        headers: { 'x-admin-key': KEY },
      });
      expect(viaProxy.status()).toBe(200);
    } finally {
      await context.close();
    }
  });

  it('a malformed cookie (bad percent-encoding) is refused with 403, not a 500', async () => {
    const context = await browser.newContext();
    try {
      for (const value of ['%E0%A4%A', '%zz', `${encodeURIComponent(KEY)}%`, KEY]) {
        const response = await context.request.get(`${url}/outbox/ui`, {
          headers: { cookie: `outbox_session=${value}` },
        });
        expect([value, response.status()]).toEqual([value, 403]);
      }
    } finally {
      await context.close();
    }
  });
});
