import { INestApplication } from '@nestjs/common';
import { NestExpressApplication } from '@nestjs/platform-express';
import { Test } from '@nestjs/testing';
import type { Browser, BrowserContext } from 'playwright-core';
import request from 'supertest';
import { describeWithBrowser, launchChromium, screenshot } from './browser';

process.env.SAMPLE_DB = ':memory:';
const { AppModule } =
  require('../../../sample-app/app.module') as typeof import('../../../sample-app/app.module');

/** The sample app's sign-in form, driven by a browser that sends no header of its own. */
describeWithBrowser('Sample app: sign in from a plain browser', () => {
  let app: INestApplication;
  let url: string;
  let browser: Browser;
  let context: BrowserContext;

  beforeAll(async () => {
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    app = moduleRef.createNestApplication<NestExpressApplication>({ logger: false });
    // As behind a TLS-terminating proxy: X-Forwarded-Proto says whether the browser used HTTPS.
    (app as NestExpressApplication).set('trust proxy', 'loopback');
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    browser = await launchChromium();
  }, 60_000);

  beforeEach(async () => {
    context = await browser.newContext({ timezoneId: 'UTC' });
    context.setDefaultTimeout(10_000);
  });

  afterEach(() => context?.close());

  afterAll(async () => {
    await browser?.close();
    await app?.close();
  });

  it('refuses the page, signs in through the form, opens the dashboard, signs out', async () => {
    const page = await context.newPage();
    expect((await page.goto(`${url}/outbox/ui`))?.status()).toBe(403);

    await page.goto(`${url}/admin/sign-in`);
    await screenshot(page, 'sample-sign-in');
    await page.locator('input[name=key]').fill('not-the-key');
    await page.locator('button[type=submit]').click();
    await page.locator('[role=alert]').filter({ hasText: 'not the admin key' }).waitFor();
    expect(await context.cookies()).not.toContainEqual(
      expect.objectContaining({ name: 'outbox_session' }),
    );

    await page.locator('input[name=key]').fill('sample-admin-key');
    await Promise.all([
      page.waitForURL(`${url}/outbox/ui`),
      page.locator('button[type=submit]').click(),
    ]);
    await page.locator('#view-overview, #view-stats').first().waitFor();
    const session = (await context.cookies()).find((c) => c.name === 'outbox_session');
    expect(session).toMatchObject({ httpOnly: true, sameSite: 'Strict', secure: false, path: '/' });
    // The page's own API calls carry the cookie.
    expect((await context.request.get(`${url}/outbox/stats`)).status()).toBe(200);
    await screenshot(page, 'sample-signed-in');

    const out = await context.request.post(`${url}/admin/sign-out`, { maxRedirects: 0 });
    expect(out.status()).toBe(303);
    expect((await context.request.get(`${url}/outbox/stats`)).status()).toBe(403);
    // The session is closed on the server, not only forgotten by this browser.
    const replayed = await request(app.getHttpServer())
      .get('/outbox/stats')
      .set('Cookie', `outbox_session=${session!.value}`);
    expect(replayed.status).toBe(403);
  });

  it('refuses a sign-in without the form token, with a wrong one, or from another origin', async () => {
    const http = () => request(app.getHttpServer());
    const form = await http().get('/admin/sign-in').expect(200);
    const token = /name="csrf" value="([^"]+)"/.exec(form.text)![1];
    const csrfCookie = String(form.headers['set-cookie']).split(';')[0];
    expect(form.headers['content-security-policy']).toContain("default-src 'none'");

    const attempts = [
      http().post('/admin/sign-in').type('form').send({ key: 'sample-admin-key', csrf: token }),
      http()
        .post('/admin/sign-in')
        .set('Cookie', csrfCookie)
        .type('form')
        .send({ key: 'sample-admin-key', csrf: 'forged' }),
      http()
        .post('/admin/sign-in')
        .set('Cookie', csrfCookie)
        .set('Origin', 'https://evil.example')
        .type('form')
        .send({ key: 'sample-admin-key', csrf: token }),
    ];
    for (const attempt of attempts) {
      const res = await attempt;
      expect(res.status).toBe(403);
      expect(String(res.headers['set-cookie'])).not.toContain('outbox_session');
    }

    const ok = await http()
      .post('/admin/sign-in')
      .set('Cookie', csrfCookie)
      .set('Origin', `http://${new URL(url).host}`)
      .type('form')
      .send({ key: 'sample-admin-key', csrf: token })
      .expect(303);
    expect(ok.headers.location).toBe('/outbox/ui');
    expect(String(ok.headers['set-cookie'])).not.toContain('Secure');
  });

  it('marks the session cookie Secure when the browser came over HTTPS', async () => {
    const http = () => request(app.getHttpServer());
    const form = await http().get('/admin/sign-in').set('X-Forwarded-Proto', 'https').expect(200);
    const token = /name="csrf" value="([^"]+)"/.exec(form.text)![1];
    expect(String(form.headers['set-cookie'])).toContain('; Secure');
    const res = await http()
      .post('/admin/sign-in')
      .set('X-Forwarded-Proto', 'https')
      .set('Cookie', String(form.headers['set-cookie']).split(';')[0])
      .type('form')
      .send({ key: 'sample-admin-key', csrf: token })
      .expect(303);
    const set = String(res.headers['set-cookie']);
    expect(set).toMatch(
      /^outbox_session=[\w-]+; Path=\/; HttpOnly; SameSite=Strict; Secure; Max-Age=28800$/,
    );
  });
});
