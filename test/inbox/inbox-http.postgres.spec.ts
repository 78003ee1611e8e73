import { Body, Controller, INestApplication, Inject, Module, Post, Req } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Inbox, InboxContext, OutboxModule } from 'nestjs-outbox';
import { describeWithService } from '../support/services';
import {
  createEffectTable,
  inboxTable,
  openInboxDataSource,
  uniquePrefix,
} from './inbox-test-helpers';

const EFFECTS = Symbol('EFFECTS');
type Effects = Awaited<ReturnType<typeof createEffectTable>>;

interface UserRequest {
  headers: Record<string, string | undefined>;
}

@Controller('orders')
class OrdersController {
  constructor(
    @Inject(EFFECTS) private readonly effects: Effects,
    private readonly inbox: InboxContext,
  ) {}

  // Default: keys scoped by the consumer only, bound to method, URL and body.
  @Post()
  @Inbox({ consumer: 'orders', duplicateResult: { status: 'duplicate' } })
  async place(@Body() body: { item: string }, @Req() req: UserRequest) {
    await this.record(req, body.item);
    return { status: 'placed', item: body.item };
  }

  // Keys scoped by the authenticated principal (here a header standing in for req.user).
  @Post('scoped')
  @Inbox({
    consumer: 'orders-scoped',
    scope: (req: UserRequest) => req.headers['x-user'],
    duplicateResult: { status: 'duplicate' },
  })
  async placeScoped(@Body() body: { item: string }, @Req() req: UserRequest) {
    await this.record(req, body.item);
    return { status: 'placed', item: body.item };
  }

  private async record(req: UserRequest, item: string) {
    await this.inbox.manager.query(this.effects.insertSql, [
      req.headers['idempotency-key'],
      `${req.headers['x-user'] ?? 'anonymous'}:${item}`,
    ]);
  }
}

let release: () => void = () => undefined;
let started: () => void = () => undefined;

@Controller('slow')
class SlowController {
  @Post()
  @Inbox({ lockTimeoutMs: 300, duplicateResult: { status: 'duplicate' } })
  async slow(@Body() _body: object): Promise<{ status: string }> {
    started();
    await new Promise<void>((resolve) => (release = resolve));
    return { status: 'done' };
  }
}

describeWithService('postgres', '@Inbox() on HTTP routes', () => {
  let dataSource: DataSource;
  let app: INestApplication;
  let effects: Effects;
  const prefix = uniquePrefix('inboxhttp');

  beforeAll(async () => {
    dataSource = await openInboxDataSource('postgres');
    effects = await createEffectTable(dataSource, `${prefix}effects`);
    @Module({
      imports: [
        OutboxModule.forRoot({
          store: { type: 'memory' },
          dispatcher: { enabled: false },
          inbox: { dataSource, tablePrefix: prefix, cleanupIntervalMs: 0 },
        }),
      ],
      controllers: [SlowController, OrdersController],
      providers: [{ provide: EFFECTS, useValue: effects }],
    })
    class HttpKeysApp {}
    const moduleRef = await Test.createTestingModule({ imports: [HttpKeysApp] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
  });

  afterAll(async () => {
    await app?.close();
    await effects?.drop();
    await inboxTable(dataSource, prefix).drop();
    await dataSource?.destroy();
  });

  const post = (path: string, body: object, key: string, user?: string) => {
    const req = request(app.getHttpServer()).post(path).set('Idempotency-Key', key);
    return (user ? req.set('x-user', user) : req).send(body);
  };

  it('answers 422 when a key is reused with a different body, and runs nothing', async () => {
    await post('/orders', { item: 'book' }, 'k-1').expect(201, { status: 'placed', item: 'book' });
    const reused = await post('/orders', { item: 'car' }, 'k-1').expect(422);
    expect(reused.body.message).toMatch(/already used for a different request/);
    // The same request again is a duplicate.
    await post('/orders', { item: 'book' }, 'k-1').expect(201, { status: 'duplicate' });
    expect(await effects.count('k-1')).toBe(1);
  });

  it('binds the key to the method and URL too (query string included)', async () => {
    await post('/orders?shop=1', { item: 'pen' }, 'k-2').expect(201);
    await post('/orders?shop=2', { item: 'pen' }, 'k-2').expect(422);
    await post('/orders?shop=1', { item: 'pen' }, 'k-2').expect(201, { status: 'duplicate' });
    expect(await effects.count('k-2')).toBe(1);
  });

  it('default scope: all callers of a route share the key space (an equal request is a duplicate)', async () => {
    await post('/orders', { item: 'cup' }, 'k-3', 'alice').expect(201);
    await post('/orders', { item: 'cup' }, 'k-3', 'bob').expect(201, { status: 'duplicate' });
    await post('/orders', { item: 'mug' }, 'k-3', 'bob').expect(422);
    expect(await effects.count('k-3')).toBe(1);
  });

  it('scope(request): the same key from two principals is two requests; each is idempotent on its own', async () => {
    await post('/orders/scoped', { item: 'a' }, 'k-4', 'alice').expect(201, {
      status: 'placed',
      item: 'a',
    });
    await post('/orders/scoped', { item: 'b' }, 'k-4', 'bob').expect(201, {
      status: 'placed',
      item: 'b',
    });
    await post('/orders/scoped', { item: 'a' }, 'k-4', 'alice').expect(201, {
      status: 'duplicate',
    });
    await post('/orders/scoped', { item: 'c' }, 'k-4', 'bob').expect(422);
    await post('/orders/scoped', { item: 'x' }, 'k-4').expect(201, { status: 'placed', item: 'x' });
    expect(await effects.count('k-4')).toBe(3);
    const rows: { message_id: string; fingerprint: string }[] = await dataSource.query(
      `SELECT message_id, fingerprint FROM ${inboxTable(dataSource, prefix).table} WHERE consumer = 'orders-scoped'`,
    );
    expect(rows).toHaveLength(3);
    for (const row of rows) {
      expect(row.message_id).toMatch(/^scoped:[A-Za-z0-9_-]{43}$/);
      expect(row.fingerprint).toMatch(/^[A-Za-z0-9_-]{43}$/);
    }
  });

  it('a record without a fingerprint (written before schema version 2) counts as a duplicate', async () => {
    await dataSource.query(
      `INSERT INTO ${inboxTable(dataSource, prefix).table} (consumer, message_id) VALUES ('orders', 'k-old')`,
    );
    await post('/orders', { item: 'any' }, 'k-old').expect(201, { status: 'duplicate' });
    expect(await effects.count('k-old')).toBe(0);
  });

  it('answers 409 to a repeat whose key is still being processed, after lockTimeoutMs', async () => {
    const running = new Promise<void>((resolve) => (started = resolve));
    const first = post('/slow', {}, 'slow-1').then((res) => res);
    await running;
    const at = Date.now();
    const repeat = await post('/slow', {}, 'slow-1');
    expect(repeat.status).toBe(409);
    expect(repeat.body.message).toMatch(/still being processed/);
    expect(Date.now() - at).toBeLessThan(5_000);
    release();
    expect((await first).body).toEqual({ status: 'done' });
    await post('/slow', {}, 'slow-1').expect(201, { status: 'duplicate' });
  });
});
