import { request as httpRequest, Server } from 'node:http';
import { AddressInfo } from 'node:net';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import {
  CanActivate,
  ExecutionContext,
  Injectable,
  Logger,
  Module,
  UnauthorizedException,
  ValidationPipe,
} from '@nestjs/common';
import { RouterModule } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { MemoryOutboxStore, OutboxModule, OutboxValidationError } from 'nestjs-outbox';
import { OutboxAdminModule, OutboxAdminOptionsError } from 'nestjs-outbox';
import {
  AdminApp,
  API_KEY,
  ApiKeyGuard,
  ApiKeys,
  ApiKeysModule,
  createAdminApp,
  seed,
  snapshot,
} from './admin-app';

const key = { 'x-api-key': API_KEY };
const memory = () => ({ type: 'memory' as const });

describe('OutboxAdminModule', () => {
  let t: AdminApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
    jest.restoreAllMocks();
  });

  describe('bootstrap', () => {
    it.each([
      ['register() without guards', () => OutboxAdminModule.register({})],
      ['register() with an empty guard list', () => OutboxAdminModule.register({ guards: [] })],
      [
        'registerAsync() whose factory returns no guards',
        () => OutboxAdminModule.registerAsync({ useFactory: () => ({}) }),
      ],
      [
        'allowUnauthenticated: false',
        () => OutboxAdminModule.register({ guards: [], allowUnauthenticated: false }),
      ],
    ])('fails with %s', async (_name, admin) => {
      await expect(createAdminApp({ store: memory(), admin: admin() })).rejects.toThrow(
        OutboxAdminOptionsError,
      );
      await expect(createAdminApp({ store: memory(), admin: admin() })).rejects.toThrow(
        /at least one guard/,
      );
    });

    it.each([
      ['maxPageSize above 1,000', { maxPageSize: 1001 }],
      ['maxPageSize 0', { maxPageSize: 0 }],
      ['defaultPageSize above maxPageSize', { maxPageSize: 10, defaultPageSize: 20 }],
      ['a fractional body limit', { maxBodyBytes: 1.5 }],
    ])('fails with %s', async (_name, limits) => {
      await expect(
        createAdminApp({
          store: memory(),
          admin: OutboxAdminModule.register({
            guards: [ApiKeyGuard],
            imports: [ApiKeysModule],
            limits,
          }),
        }),
      ).rejects.toThrow(OutboxAdminOptionsError);
    });

    it('fails when the app has no OutboxModule', async () => {
      const moduleRef = await Test.createTestingModule({
        imports: [OutboxAdminModule.register({ allowUnauthenticated: true })],
      }).compile();
      const app = moduleRef.createNestApplication({ logger: false });
      await expect(app.init()).rejects.toThrow(/import OutboxModule.forRoot/);
      await app.close();
    });

    it('mounts without guards only with allowUnauthenticated: true, and warns at every start', async () => {
      const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
      for (let start = 1; start <= 2; start++) {
        t = await createAdminApp({
          store: memory(),
          admin: OutboxAdminModule.register({ allowUnauthenticated: true }),
        });
        await t.http.get('/outbox/stats').expect(200);
        await t.close();
        t = undefined;
        const warnings = warn.mock.calls.filter(([message]) =>
          String(message).includes('WITHOUT any guard'),
        );
        expect(warnings).toHaveLength(start);
      }
    });
  });

  describe('guards', () => {
    it('builds a guard class through DI with dependencies from `imports`', async () => {
      t = await createAdminApp({ store: memory() });
      await t.http.get('/outbox/stats').expect(403);
      await t.http.get('/outbox/stats').set(key).expect(200);
      // Same ApiKeys instance as the module's: the guard saw a key added at run time.
      t.app.get(ApiKeys, { strict: false }).accepted.add('rotated');
      await t.http.get('/outbox/stats').set('x-api-key', 'rotated').expect(200);
    });

    it('runs every guard in order and stops at the first refusal; guard exceptions keep their status', async () => {
      const order: string[] = [];
      const allow: CanActivate = { canActivate: () => (order.push('allow'), true) };
      const unauthorized: CanActivate = {
        canActivate: () => {
          order.push('unauthorized');
          throw new UnauthorizedException('API key required');
        },
      };
      const never: CanActivate = { canActivate: () => (order.push('never'), true) };
      t = await createAdminApp({
        store: memory(),
        admin: OutboxAdminModule.register({ guards: [allow, unauthorized, never] }),
      });
      const res = await t.http.get('/outbox/stats').expect(401);
      expect(res.body).toEqual({
        statusCode: 401,
        error: 'Unauthorized',
        message: 'API key required',
      });
      expect(res.headers['cache-control']).toBe('no-store');
      expect(order).toEqual(['allow', 'unauthorized']);
    });

    it('takes guards from a registerAsync factory with injected dependencies', async () => {
      @Injectable()
      class Config {
        readonly adminKey = 'from-config';
      }
      @Module({ providers: [Config], exports: [Config] })
      class ConfigModule {}
      class KeyGuard implements CanActivate {
        constructor(private readonly expected: string) {}
        canActivate(context: ExecutionContext): boolean {
          return context.switchToHttp().getRequest().headers['x-api-key'] === this.expected;
        }
      }
      t = await createAdminApp({
        store: memory(),
        admin: OutboxAdminModule.registerAsync({
          imports: [ConfigModule],
          inject: [Config],
          useFactory: (config: Config) => ({
            guards: [new KeyGuard(config.adminKey)],
            limits: { maxPageSize: 5 },
          }),
        }),
      });
      await t.http.get('/outbox/stats').set(key).expect(403);
      await t.http.get('/outbox/stats').set('x-api-key', 'from-config').expect(200);
      await t.http.get('/outbox/dead-letters?limit=6').set('x-api-key', 'from-config').expect(400);
    });

    it('uses a guard the app already provides as is', async () => {
      const seen: string[] = [];
      @Injectable()
      class AppGuard implements CanActivate {
        canActivate(): boolean {
          seen.push('app');
          return true;
        }
      }
      @Module({ providers: [AppGuard], exports: [AppGuard] })
      class AuthModule {}
      t = await createAdminApp({
        store: memory(),
        imports: [AuthModule],
        admin: OutboxAdminModule.register({ guards: [AppGuard] }),
      });
      await t.http.get('/outbox/stats').expect(200);
      expect(seen).toEqual(['app']);
      expect(t.app.get(AppGuard, { strict: false })).toBeInstanceOf(AppGuard);
    });
  });

  describe('mounting', () => {
    const admin = (path?: string) =>
      OutboxAdminModule.register({ guards: [ApiKeyGuard], imports: [ApiKeysModule], path });

    it('mounts under a custom path', async () => {
      t = await createAdminApp({ store: memory(), admin: admin('ops/outbox') });
      await t.http.get('/ops/outbox/stats').set(key).expect(200);
      await t.http.get('/outbox/stats').set(key).expect(404);
    });

    it('composes with RouterModule', async () => {
      t = await createAdminApp({
        store: memory(),
        admin: admin(),
        imports: [RouterModule.register([{ path: 'internal/admin', module: OutboxAdminModule }])],
      });
      await t.http.get('/internal/admin/outbox/stats').set(key).expect(200);
      await t.http.get('/outbox/stats').set(key).expect(404);
    });

    it('finds the store from a feature module when OutboxModule is not global', async () => {
      @Module({ imports: [admin('feature')] })
      class FeatureModule {}
      t = await createAdminApp({ store: memory(), admin: FeatureModule, outboxGlobal: false });
      await seed(t, { orders: 1, users: 0 });
      const res = await t.http.get('/feature/stats').set(key).expect(200);
      expect(res.body.dead).toBe(2);
    });

    it('finds the store when OutboxModule is global', async () => {
      t = await createAdminApp({ store: memory(), outboxGlobal: true });
      await seed(t, { orders: 1, users: 0 });
      expect((await t.http.get('/outbox/stats').set(key).expect(200)).body.dead).toBe(2);
    });

    it('works under a global prefix and next to a global ValidationPipe with other settings', async () => {
      const moduleRef = await Test.createTestingModule({
        imports: [
          OutboxModule.forRoot({ store: memory(), dispatcher: { enabled: false } }),
          admin(),
        ],
      }).compile();
      const app = moduleRef.createNestApplication({ logger: false });
      app.setGlobalPrefix('api');
      app.useGlobalPipes(new ValidationPipe({ transform: true }));
      await app.init();
      try {
        const http = request(app.getHttpServer());
        await http
          .get('/api/outbox/dead-letters?limit=5&failedBefore=2030-01-01T00:00:00Z')
          .set(key)
          .expect(200);
        await http.get('/api/outbox/dead-letters?limit=abc').set(key).expect(400);
        await http.get('/api/outbox/dead-letters?extra=1').set(key).expect(400);
        await http.post('/api/outbox/dead-letters/purge').set(key).send({ filter: {} }).expect(400);
        await http
          .post('/api/outbox/dead-letters/purge')
          .set(key)
          .send({ filter: {}, all: true })
          .expect(200, { purged: 0 });
      } finally {
        await app.close();
      }
    });
  });

  describe('limits and errors', () => {
    it('measures a chunked body (no Content-Length) against the limit', async () => {
      t = await createAdminApp({
        store: memory(),
        admin: OutboxAdminModule.register({
          guards: [ApiKeyGuard],
          imports: [ApiKeysModule],
          limits: { maxBodyBytes: 1024 },
        }),
      });
      await seed(t, { orders: 1, users: 0 });
      const before = await snapshot(t);
      const body = JSON.stringify({ filter: { type: 'x'.repeat(2000) } });
      const req = t.http
        .post('/outbox/dead-letters/purge')
        .set(key)
        .set('Content-Type', 'application/json');
      // Writing in pieces makes superagent send Transfer-Encoding: chunked.
      req.write(body.slice(0, 500));
      req.write(body.slice(500));
      const res = await req;
      expect(res.status).toBe(413);
      expect(await snapshot(t)).toEqual(before);
    });

    // Re-serializing the parsed body to measure it overflowed the stack on deep nesting and
    // counted 0 bytes, so this 80 KB body got the validation pipe's 400 instead.
    it('answers 413 to a chunked, deeply nested body over the limit, before validation', async () => {
      t = await createAdminApp({ store: memory() });
      await seed(t, { orders: 1, users: 0 });
      const before = await snapshot(t);
      const depth = 40_000;
      const body = `{"filter": ${'['.repeat(depth)}${']'.repeat(depth)}, "all": true}`;
      expect(body.length).toBeGreaterThan(64 * 1024);
      expect(body.length).toBeLessThan(100 * 1024); // under Express's own limit
      const req = t.http
        .post('/outbox/dead-letters/purge')
        .set(key)
        .set('Content-Type', 'application/json');
      for (let i = 0; i < body.length; i += 16_384) req.write(body.slice(i, i + 16_384));
      const res = await req;
      // The request head as written (Node adds Transfer-Encoding itself, so getHeader misses it).
      const head = (res as unknown as { req: { _header: string } }).req._header;
      expect(head).toMatch(/^transfer-encoding: chunked\r$/im);
      expect(head).not.toMatch(/^content-length:/im);
      expect({ status: res.status, message: res.body.message }).toEqual({
        status: 413,
        message: 'request body is larger than 65536 bytes',
      });
      expect(await snapshot(t)).toEqual(before);
    });

    // The parser inflates a compressed body after its (compressed) Content-Length passed the
    // limit: 88 bytes on the wire, 2.3 KB of ids that purged as many.
    it('refuses a compressed body (415), whose Content-Length is not the size it parses to', async () => {
      t = await createAdminApp({
        store: memory(),
        admin: OutboxAdminModule.register({
          guards: [ApiKeyGuard],
          imports: [ApiKeysModule],
          limits: { maxBodyBytes: 1024 },
        }),
      });
      await seed(t, { orders: 1, users: 0 });
      const before = await snapshot(t);
      const json = JSON.stringify({ ids: Array(60).fill('00000000-0000-4000-8000-000000000000') });
      expect(json.length).toBeGreaterThan(1024);
      const zipped = gzipSync(json);
      expect(zipped.length).toBeLessThan(1024);
      const encoded = {
        gzip: zipped,
        deflate: deflateSync(json),
        br: brotliCompressSync(json),
      };
      for (const [encoding, body] of Object.entries(encoded)) {
        // Sent as bytes (superagent would serialize a Buffer under a JSON content type).
        const status = await rawPost(t, '/outbox/dead-letters/purge', body, {
          ...key,
          'content-type': 'application/json',
          'content-encoding': encoding,
        });
        expect({ encoding, status }).toEqual({ encoding, status: 415 });
      }
      expect(await snapshot(t)).toEqual(before);
      // identity is no compression
      await t.http
        .post('/outbox/dead-letters/purge')
        .set(key)
        .set('Content-Type', 'application/json')
        .set('Content-Encoding', 'identity')
        .send({ filter: { type: 'order.placed' } })
        .expect(200, { purged: 2 });
    });

    it('takes a chunked body under the limit', async () => {
      t = await createAdminApp({ store: memory() });
      await seed(t, { orders: 1, users: 0 });
      const req = t.http
        .post('/outbox/dead-letters/purge')
        .set(key)
        .set('Content-Type', 'application/json');
      req.write('{"filter": {"type": ');
      req.write('"order.placed"}}');
      await req.expect(200, { purged: 2 });
    });

    it('measures the raw body when the app keeps it', async () => {
      t = await createAdminApp({
        store: memory(),
        rawBody: true,
        admin: OutboxAdminModule.register({
          guards: [ApiKeyGuard],
          imports: [ApiKeysModule],
          limits: { maxBodyBytes: 100 },
        }),
      });
      await t.http
        .post('/outbox/dead-letters/purge')
        .set(key)
        .send({ filter: { type: 'x'.repeat(200) } })
        .expect(413);
      await t.http
        .post('/outbox/dead-letters/purge')
        .set(key)
        .send({ filter: { type: 'x' } })
        .expect(200);
    });

    it('answers a store failure with a generic 500 and logs the real error', async () => {
      const store = new MemoryOutboxStore();
      const secret = new Error(
        'relation "outbox_deliveries" does not exist: SELECT * FROM outbox_deliveries',
      );
      jest.spyOn(store, 'stats').mockRejectedValue(secret);
      const logged = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
      t = await createAdminApp({ store: { type: 'custom', store } });
      const res = await t.http.get('/outbox/stats').set(key).expect(500);
      expect(res.headers['cache-control']).toBe('no-store');
      expect(res.body).toEqual({
        statusCode: 500,
        error: 'Internal Server Error',
        message: 'The outbox admin request failed; see the server log',
      });
      expect(logged).toHaveBeenCalledWith(
        expect.stringContaining('SELECT * FROM outbox_deliveries'),
        secret.stack,
      );
    });

    it('answers a store validation error with 400', async () => {
      const store = new MemoryOutboxStore();
      jest
        .spyOn(store, 'summarizeDeadLetters')
        .mockRejectedValue(new OutboxValidationError('filter.key', 'too long'));
      t = await createAdminApp({ store: { type: 'custom', store } });
      const res = await t.http.get('/outbox/dead-letters/summary').set(key).expect(400);
      expect(res.body).toEqual({
        statusCode: 400,
        error: 'Bad Request',
        message: 'Invalid filter.key: too long',
      });
    });

    it('honours a configured maxPageSize up to 1,000', async () => {
      t = await createAdminApp({
        store: memory(),
        admin: OutboxAdminModule.register({
          guards: [ApiKeyGuard],
          imports: [ApiKeysModule],
          limits: { maxPageSize: 1000 },
        }),
      });
      await t.http.get('/outbox/dead-letters?limit=1000').set(key).expect(200);
      await t.http.get('/outbox/dead-letters?limit=1001').set(key).expect(400);
    });
  });
});

/** POSTs `body` as given, with a Content-Length, to the app's server; resolves the status. */
async function rawPost(
  t: { app: { getHttpServer(): Server } },
  path: string,
  body: Buffer,
  headers: Record<string, string>,
): Promise<number> {
  const server = t.app.getHttpServer();
  if (!server.listening) await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        headers: { ...headers, 'content-length': String(body.length) },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}
