import { Body, Controller, INestApplication, Injectable, Module, Post } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { DataSource } from 'typeorm';
import {
  Inbox,
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxService,
} from 'nestjs-outbox';
import { openDataSource } from '../stores/typeorm/typeorm-test-helpers';

@Injectable()
class Followups {
  readonly seen: string[] = [];

  @OutboxHandler('followup')
  handle(event: OutboxEvent<{ note: string }>): void {
    this.seen.push(event.payload.note);
  }
}

@Controller('consume')
class Consumer {
  constructor(private readonly outbox: OutboxService) {}

  @Post()
  @Inbox()
  async consume(@Body() body: { note: string; fail?: boolean }): Promise<{ ok: true }> {
    // No manager: the append joins the inbox transaction.
    await this.outbox.append({ type: 'followup', payload: { note: body.note } });
    if (body.fail) throw new Error('consumer failed after its append');
    return { ok: true };
  }
}

describe('append() without a manager inside @Inbox() joins the inbox transaction [sqlite]', () => {
  let dataSource: DataSource;
  let app: INestApplication;

  beforeAll(async () => {
    dataSource = await openDataSource('sqlite');
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: { type: 'typeorm', dataSource },
          dispatcher: { enabled: false },
          inbox: { dataSource, cleanupIntervalMs: 0 },
        }),
      ],
      controllers: [Consumer],
      providers: [Followups],
    })
    class InboxAmbientApp {}
    const moduleRef = await Test.createTestingModule({ imports: [InboxAmbientApp] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
  });

  afterAll(async () => {
    await app?.close();
    await dataSource?.destroy();
  });

  it('a failed consumer takes its follow-up event with it; a successful one publishes it', async () => {
    const post = (body: object) =>
      request(app.getHttpServer()).post('/consume').set('Idempotency-Key', 'k').send(body);
    await post({ note: 'failed', fail: true }).expect(500);
    await post({ note: 'applied' }).expect(201);
    await app.get(OutboxDispatcher).drain();
    expect(app.get(Followups).seen).toEqual(['applied']);
  });
});
