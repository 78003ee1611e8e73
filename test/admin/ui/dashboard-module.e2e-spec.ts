import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Test } from '@nestjs/testing';
import { RouterModule } from '@nestjs/core';
import request from 'supertest';
import { OutboxAdminModule, OutboxAdminOptionsError } from 'nestjs-outbox';
import {
  AdminApp,
  API_KEY,
  ApiKeyGuard,
  ApiKeys,
  ApiKeysModule,
  createAdminApp,
  seed,
} from '../admin-app';

const ASSETS = join(__dirname, '../../../lib/admin/ui/assets');
const key = { 'x-api-key': API_KEY };
const memory = () => ({ type: 'memory' as const });
const withUi = (extra: object = {}) =>
  OutboxAdminModule.register({
    guards: [ApiKeyGuard],
    imports: [ApiKeysModule],
    ui: true,
    ...extra,
  });

describe('OutboxAdminModule dashboard (ui: true)', () => {
  let t: AdminApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  it('is off by default: no page, the API as before', async () => {
    t = await createAdminApp({ store: memory() });
    await t.http.get('/outbox/ui').set(key).expect(404);
    await t.http.get('/outbox/ui/dashboard.js').set(key).expect(404);
    await t.http.get('/outbox/stats').set(key).expect(200);
  });

  it.each(
    (['express', 'fastify'] as const).flatMap((platform) => [
      [platform, 'ui', 'text/html; charset=utf-8', 'dashboard.html'],
      [platform, 'ui/dashboard.js', 'text/javascript; charset=utf-8', 'dashboard.js'],
      [platform, 'ui/dashboard.css', 'text/css; charset=utf-8', 'dashboard.css'],
      [platform, 'ui/favicon.svg', 'image/svg+xml; charset=utf-8', 'favicon.svg'],
    ]),
  )('on %s, serves %s with its type, no-store and the CSP', async (platform, path, type, file) => {
    t = await createAdminApp({ store: memory(), admin: withUi(), platform });
    const res = await t.http
      .get(`/outbox/${path}`)
      .set(key)
      .buffer(true)
      .parse((r, done) => {
        let text = '';
        r.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
        r.on('end', () => done(null, text));
      })
      .expect(200);
    expect(res.headers['content-type']).toBe(type);
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.headers['x-content-type-options']).toBe('nosniff');
    expect(res.headers['x-frame-options']).toBe('DENY');
    expect(res.headers['content-security-policy']).toBe(
      "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    );
    expect(res.body).toBe(readFileSync(join(ASSETS, file), 'utf8'));
    await t.http.get(`/outbox/${path}`).expect(403);
  });

  it('redirects ui/ to ../ui with a relative Location', async () => {
    t = await createAdminApp({ store: memory(), admin: withUi() });
    const res = await t.http.get('/outbox/ui/').set(key).expect(308);
    expect(res.headers.location).toBe('../ui');
  });

  it('on Fastify, ui/ is a 404 (its router keeps the trailing slash; docs/admin.md)', async () => {
    t = await createAdminApp({ store: memory(), admin: withUi(), platform: 'fastify' });
    await t.http.get('/outbox/ui/').set(key).expect(404);
    await t.http.get('/outbox/ui').set(key).expect(200);
  });

  it.each(['ui', 'ui/dashboard.js', 'ui/dashboard.css', 'ui/', 'ui/nothing.txt'])(
    'refuses %s without the guard credentials (403, nothing served)',
    async (path) => {
      t = await createAdminApp({ store: memory(), admin: withUi() });
      for (const headers of [{}, { 'x-api-key': 'wrong' }]) {
        const res = await t.http.get(`/outbox/${path}`).set(headers).expect(403);
        expect(res.headers['cache-control']).toBe('no-store');
        expect(res.body).toEqual({
          statusCode: 403,
          message: 'Forbidden resource',
          error: 'Forbidden',
        });
      }
    },
  );

  it('follows a guard that changes its mind (the same guard instance as the API)', async () => {
    t = await createAdminApp({ store: memory(), admin: withUi() });
    await t.http.get('/outbox/ui').set(key).expect(200);
    t.app.get(ApiKeys).accepted.delete(API_KEY);
    await t.http.get('/outbox/ui').set(key).expect(403);
  });

  it('answers 404 for any other file, including the page under its file name', async () => {
    t = await createAdminApp({ store: memory(), admin: withUi() });
    for (const path of [
      'ui/dashboard.html',
      'ui/index.html',
      'ui/..%2Fpackage.json',
      'ui/%2E%2E%2F%2E%2E%2Fpackage.json',
      'ui/constructor',
      'ui/__proto__',
    ]) {
      const res = await t.http.get(`/outbox/${path}`).set(key);
      expect([path, res.status]).toEqual([path, 404]);
      expect(res.text).not.toContain('"name": "nestjs-outbox"');
    }
  });

  it('redirects ui/ to ../ui, so the page relative URLs resolve', async () => {
    t = await createAdminApp({ store: memory(), admin: withUi() });
    const res = await t.http.get('/outbox/ui/').set(key).expect(308);
    expect(res.headers.location).toBe('../ui');
    expect(new URL(res.headers.location, 'http://h/outbox/ui/').pathname).toBe('/outbox/ui');
  });

  it('the page loads its files relative to itself, so any path and RouterModule prefix work', async () => {
    t = await createAdminApp({
      store: memory(),
      admin: withUi({ path: 'ops/outbox' }),
      imports: [RouterModule.register([{ path: 'internal', module: OutboxAdminModule }])],
    });
    const page = (await t.http.get('/internal/ops/outbox/ui').set(key).expect(200)).text;
    const refs = [...page.matchAll(/(?:src|href)="([^"#]+)"/g)].map((m) => m[1]);
    expect(refs.sort()).toEqual(['ui/dashboard.css', 'ui/dashboard.js', 'ui/favicon.svg']);
    for (const ref of refs) {
      const path = new URL(ref, 'http://h/internal/ops/outbox/ui').pathname;
      await t.http.get(path).set(key).expect(200);
    }
    await t.http.get('/internal/ops/outbox/stats').set(key).expect(200);
  });

  it('works with registerAsync({ ui: true })', async () => {
    t = await createAdminApp({
      store: memory(),
      admin: OutboxAdminModule.registerAsync({
        ui: true,
        imports: [ApiKeysModule],
        inject: [ApiKeys],
        useFactory: (keys: ApiKeys) => ({
          guards: [
            {
              canActivate: (ctx) =>
                keys.accepted.has(ctx.switchToHttp().getRequest().headers['x-api-key']),
            },
          ],
        }),
      }),
    });
    await t.http.get('/outbox/ui').set(key).expect(200);
    await t.http.get('/outbox/ui').expect(403);
  });

  it('with allowUnauthenticated the page is open, like the API', async () => {
    t = await createAdminApp({
      store: memory(),
      admin: OutboxAdminModule.register({ allowUnauthenticated: true, ui: true }),
    });
    await t.http.get('/outbox/ui').expect(200);
  });

  it.each([['yes'], [1], [null]])(
    'refuses ui: %p when the module is declared, naming the field',
    (ui) => {
      const declare = () =>
        OutboxAdminModule.register({
          guards: [ApiKeyGuard],
          imports: [ApiKeysModule],
          ui: ui as unknown as boolean,
        });
      expect(declare).toThrow(OutboxAdminOptionsError);
      expect(declare).toThrow(/"ui": expected true or false/);
    },
  );

  it('changes nothing on GET: the dead letters are the same after loading every file', async () => {
    t = await createAdminApp({ store: memory(), admin: withUi() });
    await seed(t, { orders: 3, users: 1 });
    const before = await t.store.stats();
    for (const path of ['ui', 'ui/dashboard.js', 'ui/dashboard.css']) {
      await t.http.get(`/outbox/${path}`).set(key).expect(200);
    }
    expect(await t.store.stats()).toEqual(before);
  });
});

describe('sample app dashboard', () => {
  it('serves /outbox/ui behind its x-admin-key guard', async () => {
    process.env.SAMPLE_DB = ':memory:';
    const { AppModule } =
      require('../../../sample-app/app.module') as typeof import('../../../sample-app/app.module');
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    try {
      const http = request(app.getHttpServer());
      await http.get('/outbox/ui').set('x-admin-key', 'sample-admin-key').expect(200);
      await http.get('/outbox/ui/dashboard.js').set('x-admin-key', 'sample-admin-key').expect(200);
      await http.get('/outbox/ui').expect(403);
    } finally {
      await app.close();
    }
  });
});

describe('DashboardAssets', () => {
  it('fails at start, naming the option and the fix, when a file is missing from the package', () => {
    const { DashboardAssets } =
      require('../../../lib/admin/ui/outbox-admin-ui.assets') as typeof import('../../../lib/admin/ui/outbox-admin-ui.assets');
    const build = () => new DashboardAssets(join(__dirname, 'no-such-dir'));
    expect(build).toThrow(OutboxAdminOptionsError);
    expect(build).toThrow(
      /"ui": the dashboard file .*dashboard\.(html|css|js) cannot be read.*reinstall nestjs-outbox/,
    );
    expect(new DashboardAssets().get('dashboard.js')?.contentType).toBe(
      'text/javascript; charset=utf-8',
    );
    expect(new DashboardAssets().get('../package.json')).toBeUndefined();
  });
});
