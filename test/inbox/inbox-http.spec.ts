import {
  BadRequestException,
  Body,
  Controller,
  INestApplication,
  Inject,
  Module,
  Post,
} from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { DataSource, EntityManager } from 'typeorm';
import { OutboxModule } from 'nestjs-outbox';
import { Inbox, InboxContext, InboxManager } from 'nestjs-outbox';
import { createEffectTable, inboxTable, openInboxDataSource } from './inbox-test-helpers';

const EFFECTS = Symbol('EFFECTS');

@Controller('payments')
class PaymentsController {
  calls = 0;

  constructor(
    private readonly inbox: InboxContext,
    @Inject(EFFECTS) private readonly effects: { insertSql: string },
  ) {}

  @Post()
  @Inbox({ duplicateResult: { status: 'duplicate' } })
  async capture(
    @Body() body: { amount: number },
    @InboxManager() manager: EntityManager,
  ): Promise<{ status: string }> {
    this.calls++;
    await manager.query(this.effects.insertSql, [this.inbox.messageId, String(body.amount)]);
    if (body.amount < 0) throw new BadRequestException('amount must not be negative');
    return { status: 'captured' };
  }

  @Post('by-body')
  @Inbox({ messageId: { path: 'requestId' }, consumer: 'payments-api' })
  async byBody(@Body() body: { requestId: string }): Promise<{ status: string }> {
    await this.inbox.manager.query(this.effects.insertSql, [body.requestId, 'by-body']);
    return { status: 'captured' };
  }
}

describe('@Inbox() on HTTP routes [sqlite]', () => {
  let dataSource: DataSource;
  let app: INestApplication;
  let effects: Awaited<ReturnType<typeof createEffectTable>>;

  beforeAll(async () => {
    dataSource = await openInboxDataSource('sqlite');
    effects = await createEffectTable(dataSource, 'http_effects');
    @Module({
      imports: [
        OutboxModule.forRoot({
          store: { type: 'memory' },
          dispatcher: { enabled: false },
          inbox: { dataSource, cleanupIntervalMs: 0 },
        }),
      ],
      controllers: [PaymentsController],
      providers: [{ provide: EFFECTS, useValue: effects }],
    })
    class HttpAppModule {}
    const moduleRef = await Test.createTestingModule({ imports: [HttpAppModule] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
  });

  afterAll(async () => {
    await app?.close();
    await dataSource?.destroy();
  });

  const post = (path: string, body: object, key?: string) => {
    const req = request(app.getHttpServer()).post(path).send(body);
    return key === undefined ? req : req.set('Idempotency-Key', key);
  };

  it('applies the same Idempotency-Key once and answers the repeat with the duplicate result', async () => {
    const first = await post('/payments', { amount: 10 }, 'key-1').expect(201);
    expect(first.body).toEqual({ status: 'captured' });
    const second = await post('/payments', { amount: 10 }, 'key-1').expect(201);
    expect(second.body).toEqual({ status: 'duplicate' });
    expect(await effects.count('key-1')).toBe(1);
    expect(
      await inboxTable(dataSource, 'outbox_').count('PaymentsController.capture', 'key-1'),
    ).toBe(1);
  });

  it('answers 400 to a request without an Idempotency-Key and runs nothing', async () => {
    const calls = app.get(PaymentsController).calls;
    const res = await post('/payments', { amount: 10 }).expect(400);
    expect(res.body.message).toMatch(/header "idempotency-key" is missing/);
    await post('/payments', { amount: 10 }, 'x'.repeat(256)).expect(400);
    expect(app.get(PaymentsController).calls).toBe(calls);
  });

  it('a failed request records nothing, so the same key can be retried', async () => {
    await post('/payments', { amount: -1 }, 'key-2').expect(400);
    expect(await effects.count('key-2')).toBe(0);
    await post('/payments', { amount: 3 }, 'key-2').expect(201, { status: 'captured' });
    expect(await effects.count('key-2')).toBe(1);
  });

  it('concurrent requests with one key apply it once', async () => {
    const responses = await Promise.all(
      Array.from({ length: 10 }, () => post('/payments', { amount: 1 }, 'key-3')),
    );
    expect(responses.map((r) => r.status)).toEqual(Array(10).fill(201));
    expect(responses.filter((r) => r.body.status === 'captured')).toHaveLength(1);
    expect(await effects.count('key-3')).toBe(1);
  });

  it('takes the id from a body path when configured', async () => {
    await post('/payments/by-body', { requestId: 'r-1' }).expect(201);
    await post('/payments/by-body', { requestId: 'r-1' }).expect(201);
    await post('/payments/by-body', {}).expect(400);
    expect(await effects.count('r-1')).toBe(1);
    expect(await inboxTable(dataSource, 'outbox_').count('payments-api', 'r-1')).toBe(1);
  });

  it('refuses ids with lone UTF-16 surrogates (drivers would store both as U+FFFD and merge them)', async () => {
    const effectsBefore = await effects.count();
    for (const requestId of ['lone-\ud800', 'lone-\udc00']) {
      const res = await post('/payments/by-body', { requestId }).expect(400);
      expect(res.body.message).toMatch(/payload path "requestId" is not well-formed Unicode/);
    }
    expect(await effects.count()).toBe(effectsBefore);
    await post('/payments/by-body', { requestId: 'pair-\ud83d\ude00' }).expect(201);
  });
});
