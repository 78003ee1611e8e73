import { Injectable, LoggerService } from '@nestjs/common';
import { EventEmitterModule, OnEvent } from '@nestjs/event-emitter';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import {
  MemoryOutboxStore,
  NonRetryableError,
  OutboxDispatcher,
  OutboxEvents,
  OutboxHandler,
  OutboxHandlerContext,
  OutboxModule,
  OutboxModuleOptions,
  OutboxObservation,
  OutboxService,
} from 'nestjs-outbox';

interface Line {
  level: string;
  context: string;
  message: string;
}

/** Keeps every line the app logs, as an app's pino or winston logger would receive it. */
class CapturingLogger implements LoggerService {
  readonly lines: Line[] = [];
  private add(level: string, message: unknown, params: unknown[]) {
    const context = typeof params.at(-1) === 'string' ? (params.at(-1) as string) : '';
    this.lines.push({ level, context, message: String(message) });
  }
  log(m: unknown, ...p: unknown[]) {
    this.add('log', m, p);
  }
  error(m: unknown, ...p: unknown[]) {
    this.add('error', m, p);
  }
  warn(m: unknown, ...p: unknown[]) {
    this.add('warn', m, p);
  }
  debug(m: unknown, ...p: unknown[]) {
    this.add('debug', m, p);
  }
  verbose(m: unknown, ...p: unknown[]) {
    this.add('verbose', m, p);
  }
  from(context: string) {
    return this.lines.filter((l) => l.context === context && l.level !== 'log');
  }
}

let offsetMs = 0;

@Injectable()
class Handlers {
  @OutboxHandler('card.charge', { name: 'charger' })
  charge() {
    throw new NonRetryableError('card declined');
  }

  /** Outlives its lease on its first attempt (the store clock jumps past it). */
  @OutboxHandler('card.note', { name: 'noter' })
  note() {}

  @OutboxHandler('card.refund', { name: 'refunder' })
  refund(_e: unknown, context: OutboxHandlerContext) {
    if (context.attempt === 1) offsetMs += 10_000;
  }
}

/** Receives the stream through @nestjs/event-emitter. */
@Injectable()
class DeadLetterAlarm {
  readonly received: OutboxObservation[] = [];
  @OnEvent('outbox.dead-lettered')
  onDead(event: OutboxObservation) {
    this.received.push(event);
  }
}

describe('the event stream and the logs built on it', () => {
  let close: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await close?.();
    close = undefined;
    offsetMs = 0;
  });

  async function start(module: Partial<OutboxModuleOptions> = {}, withEmitter = false) {
    const store = new MemoryOutboxStore({ clock: () => new Date(Date.now() + offsetMs) });
    const logger = new CapturingLogger();
    const moduleRef = await Test.createTestingModule({
      imports: [
        ScheduleModule.forRoot(),
        ...(withEmitter ? [EventEmitterModule.forRoot()] : []),
        OutboxModule.forRoot({
          store: { type: 'custom', store },
          dispatcher: { enabled: false, workerId: 'worker-7', leaseMs: 3_000 },
          ...module,
        }),
      ],
      providers: [Handlers, ...(withEmitter ? [DeadLetterAlarm] : [])],
    }).compile();
    const app = moduleRef.createNestApplication({ logger });
    await app.init();
    close = () => app.close();
    return {
      app,
      store,
      logger,
      outbox: app.get(OutboxService),
      dispatcher: app.get(OutboxDispatcher),
      events: app.get(OutboxEvents),
    };
  }

  it('reports each step of a dead letter and of a lease loss, with ids and names but no payload', async () => {
    const { outbox, dispatcher, events } = await start();
    const seen: OutboxObservation[] = [];
    events.on((e) => seen.push(e));
    // One at a time: the refund's clock jump would take the charge's lease too.
    const charge = await outbox.append({
      type: 'card.charge',
      payload: { pan: '4242424242424242' },
    });
    await dispatcher.drain();
    const refund = await outbox.append({ type: 'card.refund', payload: {} });
    await dispatcher.drain();
    const common = (eventId: string, type: string, handler: string, attempt: number) => ({
      eventId,
      type,
      handler,
      attempt,
      workerId: 'worker-7',
      deliveryId: expect.any(String),
    });
    const of = (id: string) => seen.filter((e) => 'eventId' in e && e.eventId === id);
    expect(of(charge.id)).toEqual([
      { kind: 'appended', eventId: charge.id, type: 'card.charge', handlers: 1 },
      { kind: 'claimed', ...common(charge.id, 'card.charge', 'charger', 1) },
      {
        kind: 'dead-lettered',
        ...common(charge.id, 'card.charge', 'charger', 1),
        reason: 'rejected',
        error: { name: 'NonRetryableError', message: 'card declined' },
        durationMs: expect.any(Number),
        startedAt: expect.any(Number),
        availableAt: charge.availableAt,
      },
    ]);
    // (The second claim may come before the first attempt's fenced ack is reported.)
    expect(
      of(refund.id)
        .map((e) => `${e.kind}${'attempt' in e ? ` ${e.attempt}` : ''}`)
        .sort(),
    ).toEqual(['appended', 'claimed 1', 'claimed 2', 'delivered 2', 'lease-lost 1']);
    expect(of(refund.id).find((e) => e.kind === 'lease-lost')).toEqual({
      kind: 'lease-lost',
      ...common(refund.id, 'card.refund', 'refunder', 1),
      during: 'outcome',
    });
    expect(JSON.stringify(seen)).not.toContain('4242424242424242');
  });

  it('logs one line per dead letter and per lease loss through the app logger, a debug line per claim', async () => {
    const { outbox, dispatcher, logger } = await start();
    // One at a time: the refund's clock jump would take the charge's lease too.
    const charge = await outbox.append({
      type: 'card.charge',
      payload: { pan: '4242424242424242' },
    });
    await dispatcher.drain();
    const refund = await outbox.append({ type: 'card.refund', payload: {} });
    await dispatcher.drain();
    const lines = logger.from('OutboxDispatcher');
    expect(lines.filter((l) => l.level === 'error')).toEqual([
      {
        level: 'error',
        context: 'OutboxDispatcher',
        message:
          `Handler charger failed on event ${charge.id} (type card.charge, attempt 1, worker worker-7): ` +
          'NonRetryableError: card declined; dead-lettered (rejected)',
      },
    ]);
    expect(lines.filter((l) => l.level === 'warn')).toEqual([
      {
        level: 'warn',
        context: 'OutboxDispatcher',
        message: expect.stringMatching(
          new RegExp(
            `^Lease lost for refunder on event ${refund.id} \\(type card\\.refund, attempt 1, worker worker-7\\), delivery [0-9a-f-]+, noticed at outcome; outcome discarded`,
          ),
        ),
      },
    ]);
    expect(lines.filter((l) => l.level === 'debug').map((l) => l.message)).toEqual([
      expect.stringMatching(
        `^Claimed delivery .* for charger: event ${charge.id} \\(type card.charge, attempt 1`,
      ),
      expect.stringMatching(
        `^Claimed delivery .* for refunder: event ${refund.id} \\(type card.refund, attempt 1`,
      ),
      expect.stringMatching(
        `^Claimed delivery .* for refunder: event ${refund.id} \\(type card.refund, attempt 2`,
      ),
    ]);
    expect(JSON.stringify(logger.lines)).not.toContain('4242424242424242');
  });

  it('logs: false silences those lines; the stream still runs', async () => {
    const { outbox, dispatcher, logger, events } = await start({ logs: false });
    const kinds: string[] = [];
    events.on(['dead-lettered'], (e) => kinds.push(e.kind));
    await outbox.append({ type: 'card.charge', payload: {} });
    await dispatcher.drain();
    expect(kinds).toEqual(['dead-lettered']);
    expect(logger.from('OutboxDispatcher')).toEqual([]);
  });

  it('a store error is an event and a warning; the dispatcher backs off and carries on', async () => {
    const { store, dispatcher, events, logger } = await start();
    const errors: OutboxObservation[] = [];
    events.on('store-error', (e) => errors.push(e));
    jest.spyOn(store, 'claim').mockRejectedValueOnce(new Error('connection reset'));
    await dispatcher.drain();
    expect(errors).toEqual([
      {
        kind: 'store-error',
        operation: 'claim',
        error: { name: 'Error', message: 'connection reset' },
        retryInMs: 1_000,
        workerId: 'worker-7',
      },
    ]);
    expect(logger.from('OutboxDispatcher')).toEqual([
      {
        level: 'warn',
        context: 'OutboxDispatcher',
        message: 'Store claim failed (Error: connection reset); retrying in 1000 ms',
      },
    ]);
  });

  it('a listener that throws is logged and does not break the delivery', async () => {
    const { outbox, dispatcher, events, logger } = await start();
    events.on('claimed', () => {
      throw new Error('listener bug');
    });
    await outbox.append({ type: 'card.note', payload: {} });
    await dispatcher.drain();
    expect(dispatcher.stats()).toMatchObject({ succeeded: 1 });
    expect(logger.from('OutboxEvents')).toEqual([
      {
        level: 'error',
        context: 'OutboxEvents',
        message: 'A listener of outbox "claimed" events threw: listener bug',
      },
    ]);
  });

  it('nobody listening to a kind: wants() is false and nothing is built for it; unsubscribing turns it off', async () => {
    const { events } = await start({ logs: false });
    expect(events.wants('delivered')).toBe(false);
    const off = events.on('delivered', () => undefined);
    expect(events.wants('delivered')).toBe(true);
    expect(events.wants('claimed')).toBe(false);
    off();
    expect(events.wants('delivered')).toBe(false);
    expect(() => events.on('delivred' as never, () => undefined)).toThrow(
      'OutboxEvents.on: unknown kind "delivred"',
    );
  });

  it('forwards the stream to @nestjs/event-emitter as outbox.<kind> when EventEmitterModule is registered', async () => {
    const { app, outbox, dispatcher } = await start({}, true);
    const event = await outbox.append({ type: 'card.charge', payload: {} });
    await dispatcher.drain();
    expect(app.get(DeadLetterAlarm).received).toEqual([
      expect.objectContaining({ kind: 'dead-lettered', eventId: event.id, handler: 'charger' }),
    ]);
  });
});
