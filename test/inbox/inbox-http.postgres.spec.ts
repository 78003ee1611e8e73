import { Body, Controller, INestApplication, Module, Post } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Inbox, OutboxModule } from 'nestjs-outbox';
import { describeWithService } from '../support/services';
import { inboxTable, openInboxDataSource, uniquePrefix } from './inbox-test-helpers';

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
  const prefix = uniquePrefix('inboxhttp');

  beforeAll(async () => {
    dataSource = await openInboxDataSource('postgres');
    @Module({
      imports: [
        OutboxModule.forRoot({
          store: { type: 'memory' },
          dispatcher: { enabled: false },
          inbox: { dataSource, tablePrefix: prefix, cleanupIntervalMs: 0 },
        }),
      ],
      controllers: [SlowController],
    })
    class HttpKeysApp {}
    const moduleRef = await Test.createTestingModule({ imports: [HttpKeysApp] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
  });

  afterAll(async () => {
    await app?.close();
    await inboxTable(dataSource, prefix).drop();
    await dataSource?.destroy();
  });

  const post = (path: string, body: object, key: string) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);

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
