// The "Admin API" examples of docs/admin.md, run as written (imports adjusted to this repository).
import { timingSafeEqual } from 'node:crypto';
import {
  CanActivate,
  ExecutionContext,
  Injectable,
  INestApplication,
  Module,
} from '@nestjs/common';
import { RouterModule } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { OutboxModule } from 'nestjs-outbox';
import { OutboxAdminModule } from 'nestjs-outbox';

// --- docs/admin.md: mounting behind an API-key guard ---
@Injectable()
export class AdminApiKeyGuard implements CanActivate {
  private readonly expected = Buffer.from(process.env.OUTBOX_ADMIN_KEY ?? '');

  canActivate(context: ExecutionContext): boolean {
    const header = context.switchToHttp().getRequest().headers['x-admin-key'];
    const given = Buffer.from(typeof header === 'string' ? header : '');
    // No key configured means no access, never open access.
    return (
      this.expected.length > 0 &&
      given.length === this.expected.length &&
      timingSafeEqual(given, this.expected)
    );
  }
}

@Module({
  imports: [
    ScheduleModule.forRoot(),
    OutboxModule.forRoot({ store: { type: 'memory' } }),
    OutboxAdminModule.register({ guards: [AdminApiKeyGuard] }),
  ],
})
export class AppModule {}

// --- docs/admin.md: under a RouterModule prefix, with larger pages ---
@Module({
  imports: [
    ScheduleModule.forRoot(),
    OutboxModule.forRoot({ store: { type: 'memory' } }),
    OutboxAdminModule.register({ guards: [AdminApiKeyGuard], limits: { maxPageSize: 500 } }),
    RouterModule.register([{ path: 'internal', module: OutboxAdminModule }]),
  ],
})
export class RoutedAppModule {}

// --- docs/admin.md: guards built from configuration with registerAsync ---
@Injectable()
export class AdminSecrets {
  readonly key = process.env.OUTBOX_ADMIN_KEY ?? '';
}

@Module({ providers: [AdminSecrets], exports: [AdminSecrets] })
export class SecretsModule {}

export class HeaderKeyGuard implements CanActivate {
  constructor(private readonly key: string) {}
  canActivate(context: ExecutionContext): boolean {
    return (
      this.key !== '' && context.switchToHttp().getRequest().headers['x-admin-key'] === this.key
    );
  }
}

@Module({
  imports: [
    // An API-only process: it serves the admin routes and runs no dispatcher.
    OutboxModule.forRoot({ store: { type: 'memory' }, dispatcher: { enabled: false } }),
    OutboxAdminModule.registerAsync({
      path: 'ops/outbox',
      imports: [SecretsModule],
      inject: [AdminSecrets],
      useFactory: (secrets: AdminSecrets) => ({ guards: [new HeaderKeyGuard(secrets.key)] }),
    }),
  ],
})
export class AsyncAppModule {}
// --- end of docs/admin.md examples ---

describe('docs/admin.md examples', () => {
  let app: INestApplication | undefined;
  beforeAll(() => {
    process.env.OUTBOX_ADMIN_KEY = 'readme-secret';
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });
  afterAll(() => {
    delete process.env.OUTBOX_ADMIN_KEY;
  });

  it.each([
    ['API-key guard', AppModule, '/outbox/stats'],
    ['RouterModule', RoutedAppModule, '/internal/outbox/stats'],
    ['registerAsync', AsyncAppModule, '/ops/outbox/stats'],
  ])('%s: refuses without the key and answers with it', async (_name, module, path) => {
    const moduleRef = await Test.createTestingModule({ imports: [module] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    const http = request(app.getHttpServer());
    await http.get(path).expect(403);
    await http.get(path).set('x-admin-key', 'wrong-secret!').expect(403);
    const res = await http.get(path).set('x-admin-key', 'readme-secret').expect(200);
    expect(res.body).toMatchObject({
      pending: 0,
      leased: 0,
      dead: 0,
      oldestPendingAgeMs: 0,
      byType: {},
    });
  });
});
