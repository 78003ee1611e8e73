import {
  ArgumentMetadata,
  ArgumentsHost,
  CallHandler,
  CanActivate,
  Catch,
  ExceptionFilter,
  ExecutionContext,
  INestApplication,
  Injectable,
  LoggerService,
  NestInterceptor,
  PipeTransform,
  Provider,
  UseFilters,
  UseGuards,
  UseInterceptors,
  UsePipes,
} from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { map, of, throwError } from 'rxjs';
import {
  HandledEvent,
  MemoryOutboxStore,
  NonRetryableError,
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxHandlerContext,
  OutboxModule,
  OutboxService,
} from 'nestjs-outbox';

interface LogLine {
  level: string;
  context: string;
  message: string;
}

/** Keeps every line Nest and the library log, with its level and context. */
class CapturingLogger implements LoggerService {
  readonly lines: LogLine[] = [];
  private add(level: string, message: unknown, params: unknown[]): void {
    const context = typeof params.at(-1) === 'string' ? (params.at(-1) as string) : '';
    const text = message instanceof Error ? message.message : String(message);
    this.lines.push({ level, context, message: text });
  }
  log(message: unknown, ...params: unknown[]) {
    this.add('log', message, params);
  }
  error(message: unknown, ...params: unknown[]) {
    this.add('error', message, params);
  }
  warn(message: unknown, ...params: unknown[]) {
    this.add('warn', message, params);
  }
  debug(message: unknown, ...params: unknown[]) {
    this.add('debug', message, params);
  }
  verbose(message: unknown, ...params: unknown[]) {
    this.add('verbose', message, params);
  }
  /** Lines about failures: warnings and errors, from anyone. */
  failures(): LogLine[] {
    return this.lines.filter((l) => l.level === 'warn' || l.level === 'error');
  }
}

describe('OutboxExplorer: handlers run through Nest enhancers', () => {
  let app: INestApplication | undefined;
  let store: MemoryOutboxStore;
  let logger: CapturingLogger;

  async function start(providers: Provider[]) {
    store = new MemoryOutboxStore();
    logger = new CapturingLogger();
    const moduleRef = await Test.createTestingModule({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: { type: 'custom', store },
          // drain() runs deliveries; a retry waits a minute, so each test sees one attempt.
          dispatcher: { enabled: false, backoff: { initialMs: 60_000, jitter: 0 } },
        }),
      ],
      providers,
    }).compile();
    app = moduleRef.createNestApplication({ logger });
    await app.init();
    return { outbox: app.get(OutboxService), dispatcher: app.get(OutboxDispatcher) };
  }

  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  describe('a failing handler is logged once, by the library', () => {
    @Injectable()
    class Failing {
      @OutboxHandler('retry.me', { maxAttempts: 3 })
      retried() {
        throw new Error('smtp down');
      }

      @OutboxHandler('give.up', { maxAttempts: 1 })
      exhausted() {
        throw new Error('still down');
      }
    }

    it('a planned retry is one warning and no error', async () => {
      const { outbox, dispatcher } = await start([Failing]);
      await outbox.append({ type: 'retry.me', payload: {} });
      await dispatcher.drain();
      expect(logger.failures()).toEqual([
        {
          level: 'warn',
          context: 'OutboxDispatcher',
          message: expect.stringMatching(/Failing\.retried failed .*smtp down.*retrying in/),
        },
      ]);
    });

    it('a dead letter is one error line', async () => {
      const { outbox, dispatcher } = await start([Failing]);
      await outbox.append({ type: 'give.up', payload: {} });
      await dispatcher.drain();
      expect(logger.failures()).toEqual([
        {
          level: 'error',
          context: 'OutboxDispatcher',
          message: expect.stringMatching(/Failing\.exhausted failed .*still down.*dead-lettered/),
        },
      ]);
    });

    it('a guard that denies is one line too', async () => {
      class Deny implements CanActivate {
        canActivate() {
          return false;
        }
      }
      @Injectable()
      class Guarded {
        @UseGuards(Deny)
        @OutboxHandler('guarded', { maxAttempts: 2 })
        handle() {}
      }
      const { outbox, dispatcher } = await start([Guarded]);
      await outbox.append({ type: 'guarded', payload: {} });
      await dispatcher.drain();
      expect(logger.failures()).toEqual([
        expect.objectContaining({ level: 'warn', context: 'OutboxDispatcher' }),
      ]);
    });
  });

  it('runs guards with the outbox execution context', async () => {
    const seen: unknown[] = [];
    class Inspect implements CanActivate {
      canActivate(context: ExecutionContext) {
        seen.push(context.getType(), (context.getArgByIndex(0) as OutboxEvent).type);
        return true;
      }
    }
    let runs = 0;
    @Injectable()
    class Guarded {
      @UseGuards(Inspect)
      @OutboxHandler('allowed')
      handle() {
        runs++;
      }
    }
    const { outbox, dispatcher } = await start([Guarded]);
    await outbox.append({ type: 'allowed', payload: {} });
    await dispatcher.drain();
    expect(seen).toEqual(['outbox', 'allowed']);
    expect(runs).toBe(1);
  });

  it('runs interceptors around the handler', async () => {
    const order: string[] = [];
    class Around implements NestInterceptor {
      intercept(context: ExecutionContext, next: CallHandler) {
        order.push(`before ${context.getType()} ${context.getHandler().name}`);
        return next.handle().pipe(map((result) => order.push(`after ${String(result)}`)));
      }
    }
    @Injectable()
    class Intercepted {
      @UseInterceptors(Around)
      @OutboxHandler('wrapped')
      handle() {
        order.push('handler');
        return 'done';
      }
    }
    const { outbox, dispatcher } = await start([Intercepted]);
    await outbox.append({ type: 'wrapped', payload: {} });
    await dispatcher.drain();
    expect(order).toEqual(['before outbox handle', 'handler', 'after done']);
  });

  describe('pipes', () => {
    const calls: Array<{ value: unknown; metadata: ArgumentMetadata }> = [];
    /** Upper-cases `payload.name` of the event argument; leaves other arguments as they are. */
    class UpperName implements PipeTransform {
      transform(value: unknown, metadata: ArgumentMetadata) {
        calls.push({ value, metadata });
        const event = value as OutboxEvent<{ name?: string }>;
        if (event && typeof event === 'object' && 'payload' in event && event.payload.name)
          return {
            ...event,
            payload: { ...event.payload, name: event.payload.name.toUpperCase() },
          };
        return value;
      }
    }
    class RejectEmpty implements PipeTransform {
      transform(value: OutboxEvent<{ name?: string }>) {
        if (!value.payload.name) throw new NonRetryableError('name is required');
        return value;
      }
    }

    beforeEach(() => {
      calls.length = 0;
    });

    it('@UsePipes pipes transform the handler arguments', async () => {
      const received: unknown[] = [];
      @Injectable()
      class Piped {
        @UsePipes(UpperName)
        @OutboxHandler('named')
        handle(event: OutboxEvent<{ name: string }>, ctx: OutboxHandlerContext) {
          received.push(event.payload.name, ctx.attempt, ctx.handler);
        }
      }
      const { outbox, dispatcher } = await start([Piped]);
      await outbox.append({ type: 'named', payload: { name: 'ada' } });
      await dispatcher.drain();
      expect(received).toEqual(['ADA', 1, 'Piped.handle']);
      expect(calls.map((c) => (c.value as OutboxEvent).type)).toContain('named');
    });

    it('global pipes run on handler arguments', async () => {
      const received: unknown[] = [];
      @Injectable()
      class Plain {
        @OutboxHandler('named')
        handle(event: OutboxEvent<{ name: string }>) {
          received.push(event.payload.name);
        }
      }
      store = new MemoryOutboxStore();
      const moduleRef = await Test.createTestingModule({
        imports: [
          ScheduleModule.forRoot(),
          OutboxModule.forRoot({
            store: { type: 'custom', store },
            dispatcher: { enabled: false },
          }),
        ],
        providers: [Plain],
      }).compile();
      app = moduleRef.createNestApplication({ logger: false });
      app.useGlobalPipes(new UpperName());
      await app.init();
      await app.get(OutboxService).append({ type: 'named', payload: { name: 'grace' } });
      await app.get(OutboxDispatcher).drain();
      expect(received).toEqual(['GRACE']);
    });

    it('a pipe that throws fails the attempt before the handler runs', async () => {
      let runs = 0;
      @Injectable()
      class Validated {
        @OutboxHandler('named', { maxAttempts: 5 })
        handle(@HandledEvent(RejectEmpty) event: OutboxEvent<{ name?: string }>) {
          runs += event ? 1 : 0;
        }
      }
      const { outbox, dispatcher } = await start([Validated]);
      await outbox.append({ type: 'named', payload: {} });
      await dispatcher.drain();
      expect(runs).toBe(0);
      const { items } = await store.listDeadLetters({ limit: 10 });
      expect(items[0]).toMatchObject({ reason: 'rejected' });
      expect(items[0].errors[0].message).toBe('name is required');
    });

    it('@HandledEvent(pipe) runs a pipe on the event argument only', async () => {
      const received: unknown[] = [];
      @Injectable()
      class ParamPiped {
        @OutboxHandler('named')
        handle(
          @HandledEvent(UpperName) event: OutboxEvent<{ name: string }>,
          ctx: OutboxHandlerContext,
        ) {
          received.push(event.payload.name, ctx.attempt);
        }
      }
      const { outbox, dispatcher } = await start([ParamPiped]);
      await outbox.append({ type: 'named', payload: { name: 'ada' } });
      await dispatcher.drain();
      expect(received).toEqual(['ADA', 1]);
      expect(calls).toHaveLength(1);
    });
  });

  describe('a handler no enhancer applies to runs without Nest’s pipeline, as if through it', () => {
    it('gets the event first and the context second; a rejected promise or an Observable that errors fails the attempt', async () => {
      const seen: unknown[] = [];
      @Injectable()
      class Plain {
        @OutboxHandler('plain.ok')
        ok(event: OutboxEvent<{ n: number }>, ctx: OutboxHandlerContext) {
          seen.push(event.payload.n, ctx.attempt, ctx.handler);
          return of('done');
        }
        @OutboxHandler('plain.rejects')
        async rejects() {
          throw new Error('rejected');
        }
        @OutboxHandler('plain.observable')
        observable() {
          return throwError(() => new Error('from the observable'));
        }
      }
      const { outbox, dispatcher } = await start([Plain]);
      await outbox.append([
        { type: 'plain.ok', payload: { n: 7 } },
        { type: 'plain.rejects', payload: {} },
        { type: 'plain.observable', payload: {} },
      ]);
      await dispatcher.drain();
      expect(seen).toEqual([7, 1, 'Plain.ok']);
      const messages = logger.failures().map((l) => l.message);
      expect(messages.some((m) => m.includes('rejected'))).toBe(true);
      expect(messages.some((m) => m.includes('from the observable'))).toBe(true);
      expect(dispatcher.stats()).toMatchObject({ succeeded: 1, retried: 2 });
    });

    it('@HandledEvent() without a pipe puts the event where it is declared', async () => {
      const seen: unknown[] = [];
      @Injectable()
      class Swapped {
        @OutboxHandler('swapped')
        handle(ctx: OutboxHandlerContext, @HandledEvent() event: OutboxEvent<{ n: number }>) {
          seen.push(ctx.attempt, event.payload.n);
        }
      }
      const { outbox, dispatcher } = await start([Swapped]);
      await outbox.append({ type: 'swapped', payload: { n: 3 } });
      await dispatcher.drain();
      expect(seen).toEqual([1, 3]);
    });

    it('a global interceptor (APP_INTERCEPTOR) still wraps a handler that has none of its own', async () => {
      const order: string[] = [];
      @Injectable()
      class Everywhere implements NestInterceptor {
        intercept(_context: ExecutionContext, next: CallHandler) {
          order.push('global before');
          return next.handle();
        }
      }
      @Injectable()
      class Bare {
        @OutboxHandler('bare')
        handle() {
          order.push('handler');
        }
      }
      const { outbox, dispatcher } = await start([
        Bare,
        { provide: APP_INTERCEPTOR, useClass: Everywhere },
      ]);
      await outbox.append({ type: 'bare', payload: {} });
      await dispatcher.drain();
      expect(order).toEqual(['global before', 'handler']);
    });
  });

  describe('exception filters', () => {
    class CardDeclined extends Error {}

    it('a filter can turn an error into a NonRetryableError (dead letter, no retry)', async () => {
      const caught: string[] = [];
      @Catch(CardDeclined)
      class Decline implements ExceptionFilter {
        catch(error: CardDeclined, host: ArgumentsHost) {
          caught.push(`${host.getType()}: ${error.message}`);
          throw new NonRetryableError(`declined: ${error.message}`);
        }
      }
      @Injectable()
      class Charges {
        @UseFilters(Decline)
        @OutboxHandler('charge', { maxAttempts: 5 })
        handle() {
          throw new CardDeclined('insufficient funds');
        }
      }
      const { outbox, dispatcher } = await start([Charges]);
      await outbox.append({ type: 'charge', payload: {} });
      await dispatcher.drain();
      expect(caught).toEqual(['outbox: insufficient funds']);
      const { items } = await store.listDeadLetters({ limit: 10 });
      expect(items[0]).toMatchObject({ reason: 'rejected' });
      expect(logger.failures()).toEqual([
        expect.objectContaining({ level: 'error', context: 'OutboxDispatcher' }),
      ]);
    });

    it('a filter that returns a value ends the attempt as a success', async () => {
      @Catch(CardDeclined)
      class Swallow implements ExceptionFilter {
        catch() {
          return 'ignored';
        }
      }
      @Injectable()
      class Tolerant {
        @UseFilters(Swallow)
        @OutboxHandler('tolerant', { maxAttempts: 5 })
        handle() {
          throw new CardDeclined('expired');
        }
      }
      const { outbox, dispatcher } = await start([Tolerant]);
      await outbox.append({ type: 'tolerant', payload: {} });
      await dispatcher.drain();
      expect(dispatcher.stats()).toMatchObject({ succeeded: 1, failed: 0 });
      expect(logger.failures()).toEqual([]);
    });

    it('an error no filter catches goes on as it was, logged once', async () => {
      @Catch(CardDeclined)
      class Decline implements ExceptionFilter {
        catch() {
          throw new Error('not reached');
        }
      }
      @Injectable()
      class Other {
        @UseFilters(Decline)
        @OutboxHandler('other', { maxAttempts: 2 })
        handle() {
          throw new TypeError('boom');
        }
      }
      const { outbox, dispatcher } = await start([Other]);
      await outbox.append({ type: 'other', payload: {} });
      await dispatcher.drain();
      expect(logger.failures()).toEqual([
        expect.objectContaining({
          level: 'warn',
          message: expect.stringMatching(/TypeError: boom|boom/),
        }),
      ]);
    });
  });
});
