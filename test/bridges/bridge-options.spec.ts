import { Injectable } from '@nestjs/common';
import { CqrsModule, EventsHandler, IEventHandler } from '@nestjs/cqrs';
import { OnEvent } from '@nestjs/event-emitter';
import { Test } from '@nestjs/testing';
import {
  OutboxCqrsModule,
  OutboxedEvent,
  OutboxedHandler,
  OutboxListener,
  OutboxModule,
} from 'nestjs-outbox';

async function boot(providers: Function[], cqrs = false): Promise<void> {
  const moduleRef = await Test.createTestingModule({
    imports: [
      OutboxModule.forRoot({ store: { type: 'memory' }, dispatcher: { enabled: false } }),
      ...(cqrs ? [CqrsModule.forRoot(), OutboxCqrsModule.forRoot()] : []),
    ],
    providers: providers as never[],
  }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  try {
    await app.init();
  } finally {
    await app.close();
  }
}

describe('bridge options: bad input names the field', () => {
  it('@OutboxedEvent refuses a bad type, version or key', () => {
    expect(() => OutboxedEvent({ type: 'order placed' })(class A {})).toThrow(
      '"@OutboxedEvent type on A": "order placed" is not 1–255 characters of [A-Za-z0-9._:-]',
    );
    expect(() => OutboxedEvent({ version: 0 })(class B {})).toThrow(
      '"@OutboxedEvent version on B": expected an integer ≥ 1, got 0',
    );
    expect(() => OutboxedEvent({ key: 'orderId' as never })(class C {})).toThrow(
      '"@OutboxedEvent key on C": expected a function',
    );
  });

  it('OutboxCqrsModule.forRoot refuses unknown options and a bad key', () => {
    expect(() => OutboxCqrsModule.forRoot({ allEvent: true } as never)).toThrow(
      'did you mean OutboxCqrsModule options.allEvents?',
    );
    expect(() => OutboxCqrsModule.forRoot({ key: 'id' as never })).toThrow(
      'OutboxCqrsModule options.key',
    );
  });

  it('two event classes under one type fail bootstrap, naming both', async () => {
    @OutboxedEvent({ type: 'order.placed' })
    class OrderPlaced {}
    @OutboxedEvent({ type: 'order.placed' })
    class OrderPlacedV2 {}
    @EventsHandler(OrderPlaced, OrderPlacedV2)
    class Handler implements IEventHandler {
      handle(): void {}
    }
    await expect(boot([Handler], true)).rejects.toThrow(
      'used by both OrderPlaced and OrderPlacedV2; give one of them another type',
    );
  });

  it('@OutboxedHandler options are checked at bootstrap', async () => {
    @OutboxedEvent({ type: 'order.paid' })
    class OrderPaid {}
    @EventsHandler(OrderPaid)
    @OutboxedHandler({ maxAttempts: 0 })
    class Handler implements IEventHandler {
      handle(): void {}
    }
    await expect(boot([Handler], true)).rejects.toThrow(
      '"@OutboxHandler maxAttempts on Handler.handle": expected an integer ≥ 1, got 0',
    );
  });

  it('@OutboxListener needs @OnEvent with a plain type', async () => {
    @Injectable()
    class Lonely {
      @OutboxListener()
      handle(): void {}
    }
    await expect(boot([Lonely])).rejects.toThrow(
      '"@OutboxListener on Lonely.handle": needs @OnEvent(\'type\') on the same method',
    );
    @Injectable()
    class Wild {
      @OnEvent('order.*')
      @OutboxListener()
      handle(): void {}
    }
    await expect(boot([Wild])).rejects.toThrow('its @OnEvent name "order.*" is not an outbox type');
    @Injectable()
    class BadOptions {
      @OnEvent('order.placed')
      @OutboxListener({ maxAttempts: 0 })
      handle(): void {}
    }
    await expect(boot([BadOptions])).rejects.toThrow('maxAttempts');
  });

  it('@OutboxedHandler inbox must be a boolean or { consumer }', async () => {
    @OutboxedEvent({ type: 'order.inboxed' })
    class OrderInboxed {}
    @EventsHandler(OrderInboxed)
    @OutboxedHandler({ inbox: { consumer: '' } })
    class Handler implements IEventHandler {
      handle(): void {}
    }
    await expect(boot([Handler], true)).rejects.toThrow(
      '"@OutboxedHandler inbox on Handler": expected true, false or { consumer: string }',
    );
  });

  it('@OutboxListener inbox must be a boolean or { consumer }', async () => {
    @Injectable()
    class BadInbox {
      @OnEvent('order.placed')
      @OutboxListener({ inbox: 'yes' as never })
      handle(): void {}
    }
    await expect(boot([BadInbox])).rejects.toThrow(
      '"@OutboxListener inbox on BadInbox.handle": expected true, false or { consumer: string }',
    );
  });

  it('refuses batch options on bridge handlers, which take one event a call', async () => {
    @OutboxedEvent({ type: 'order.batched' })
    class OrderBatched {}
    @EventsHandler(OrderBatched)
    @OutboxedHandler({ batch: { max: 10 } } as never)
    class Handler implements IEventHandler {
      handle(): void {}
    }
    await expect(boot([Handler], true)).rejects.toThrow(
      '"@OutboxedHandler batch on Handler": not supported on @EventsHandler classes',
    );
    @Injectable()
    class Batched {
      @OnEvent('order.placed')
      @OutboxListener({ batch: { max: 10 } } as never)
      handle(): void {}
    }
    await expect(boot([Batched])).rejects.toThrow(
      '"@OutboxListener batch on Batched.handle": not supported on listeners',
    );
  });
});
