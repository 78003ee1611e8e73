import {
  CallHandler,
  ExecutionContext,
  Inject,
  Injectable,
  Module,
  NestInterceptor,
  UseInterceptors,
} from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { Observable, tap } from 'rxjs';
import {
  OUTBOX_STORE,
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxHandlerContext,
  OutboxModule,
  OutboxService,
  OutboxStore,
} from 'nestjs-outbox';

/** Records every call it wraps, proving Nest enhancers run around outbox handlers. */
@Injectable()
class AuditInterceptor implements NestInterceptor {
  static readonly calls: Array<{ type: string; contextType: string; outcome: string }> = [];

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const event = context.getArgByIndex<OutboxEvent>(0);
    const record = (outcome: string) =>
      AuditInterceptor.calls.push({ type: event.type, contextType: context.getType(), outcome });
    return next.handle().pipe(tap({ next: () => record('ok'), error: () => record('error') }));
  }
}

@Injectable()
class Mailer {
  failuresLeft = Infinity;
  readonly sent: string[] = [];

  @UseInterceptors(AuditInterceptor)
  @OutboxHandler('user.registered', { maxAttempts: 3, backoff: { initialMs: 20, jitter: 0 } })
  async sendWelcome(event: OutboxEvent<{ email: string }>, ctx: OutboxHandlerContext) {
    if (this.failuresLeft-- > 0) throw new Error(`SMTP down (attempt ${ctx.attempt})`);
    this.sent.push(event.payload.email);
  }
}

@Injectable()
class Registration {
  constructor(
    private readonly outbox: OutboxService,
    @Inject(OUTBOX_STORE) readonly store: OutboxStore,
  ) {}

  register(email: string) {
    return this.outbox.append({ type: 'user.registered', payload: { email }, key: email });
  }
}

@Module({
  imports: [
    ScheduleModule.forRoot(),
    OutboxModule.forRoot({
      store: { type: 'memory' },
      dispatcher: { pollInterval: 20, leaseMs: 2_000 },
    }),
  ],
  providers: [Mailer, Registration, AuditInterceptor],
})
class AppModule {}

async function waitFor(check: () => boolean | Promise<boolean>, timeoutMs = 5_000) {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('outbox end to end (real app, memory store)', () => {
  it('append → handled → failure → retries → dead → replay → handled, through interceptors', async () => {
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    const mailer = app.get(Mailer);
    const registration = app.get(Registration);
    const dispatcher = app.get(OutboxDispatcher);
    try {
      mailer.failuresLeft = 0;
      await registration.register('ada@example.com');
      await waitFor(() => mailer.sent.includes('ada@example.com'));
      expect(AuditInterceptor.calls).toEqual([
        { type: 'user.registered', contextType: 'outbox', outcome: 'ok' },
      ]);

      mailer.failuresLeft = Infinity;
      const event = await registration.register('bob@example.com');
      await waitFor(async () => (await registration.store.stats()).dead === 1);
      const { items } = await registration.store.listDeadLetters({ limit: 10 });
      expect(items).toHaveLength(1);
      expect(items[0]).toMatchObject({
        eventId: event.id,
        handler: 'Mailer.sendWelcome',
        reason: 'exhausted',
        attempts: 3,
      });
      expect(items[0].errors.map((e) => e.message)).toEqual([
        'SMTP down (attempt 1)',
        'SMTP down (attempt 2)',
        'SMTP down (attempt 3)',
      ]);
      expect(AuditInterceptor.calls.filter((c) => c.outcome === 'error')).toHaveLength(3);

      mailer.failuresLeft = 0;
      expect(await registration.store.replay({ ids: [items[0].id] })).toBe(1);
      await waitFor(() => mailer.sent.includes('bob@example.com'));
      // The handler's slot frees when it returns; its ack follows in the background.
      await waitFor(async () => (await registration.store.stats()).leased === 0);
      expect(await registration.store.stats()).toMatchObject({ pending: 0, leased: 0, dead: 0 });
      expect(dispatcher.stats()).toMatchObject({ succeeded: 2, deadLettered: 1, retried: 2 });
    } finally {
      await app.close();
    }
  });
});
