import { Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  Inbox,
  InboxModule,
  OutboxAdminModule,
  OutboxAdminOptionsError,
  OutboxHandler,
  OutboxModule,
  OutboxOptionsError,
} from 'nestjs-outbox';
import { fraction, positiveInt, refuseUnknownKeys } from '../lib/option-fields';
import { resolveBackoff } from '../lib/outbox-options';
import { OutboxRelayModule } from '../lib/relay/outbox-relay.module';
import { OutboxedEvent } from '../lib/bridges/cqrs/outboxed-event.decorator';
import { resolveOutboxAdminOptions } from '../lib/admin/outbox-admin-options';

/** Unknown option keys are refused everywhere options are read (docs/configuration.md). */

async function bootError(imports: any[], providers: any[] = []): Promise<unknown> {
  try {
    const moduleRef = await Test.createTestingModule({ imports, providers }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    await app.close();
    return null;
  } catch (error) {
    return error;
  }
}

describe('numeric option readers', () => {
  it('say NaN and Infinity as such (JSON would say null)', () => {
    expect(() => positiveInt('x.concurrency', NaN, 1)).toThrow(/got NaN$/);
    expect(() => positiveInt('x.concurrency', Infinity, 1)).toThrow(/got Infinity$/);
    expect(() => fraction('x.jitter', NaN, 0.2)).toThrow(/got NaN$/);
    expect(() => positiveInt('x.concurrency', '4', 1)).toThrow(/got "4"$/);
  });

  it('say NaN as such in the backoff, relay and @OutboxedEvent readers too', () => {
    expect(() =>
      resolveBackoff('backoff', { factor: NaN }, { initialMs: 1, maxMs: 2, factor: 2, jitter: 0 }),
    ).toThrow(/got NaN$/);
    const relay = { name: 'r', client: 'BROKER', types: 'a.b' };
    expect(() => OutboxRelayModule.register({ ...relay, publishTimeoutMs: NaN })).toThrow(
      /got NaN$/,
    );
    expect(() => OutboxRelayModule.register({ ...relay, mqttQos: NaN as 1 })).toThrow(/got NaN$/);
    expect(() => OutboxedEvent({ version: NaN })(class Placed {})).toThrow(/got NaN$/);
  });
});

describe('refuseUnknownKeys', () => {
  const known = { pollInterval: true, batchSize: true, allowInProduction: true } as const;

  it.each([
    ['pollIntervalMs', 'x.pollInterval'],
    ['batchsize', 'x.batchSize'],
    ['bachSize', 'x.batchSize'],
    ['allowInProd', 'x.allowInProduction'],
  ])('suggests the closest key for %s', (key, closest) => {
    expect(() => refuseUnknownKeys('x', { [key]: 1 }, known)).toThrow(
      `Invalid OutboxModule option "x.${key}": not an option; did you mean ${closest}?`,
    );
  });

  it('lists the options when nothing is close, and accepts known keys', () => {
    expect(() => refuseUnknownKeys('', { zzz: 1 }, known)).toThrow(
      'Invalid OutboxModule option "zzz": not an option; the options here are pollInterval, batchSize, allowInProduction',
    );
    expect(() => refuseUnknownKeys('', { batchSize: 1, pollInterval: 2 }, known)).not.toThrow();
  });
});

describe('unknown option keys', () => {
  const memory = () =>
    OutboxModule.forRoot({ store: { type: 'memory' }, dispatcher: { enabled: false } });

  it('@OutboxHandler options and their idempotency options', async () => {
    @Injectable()
    class Typo {
      @OutboxHandler('a.b', { maxAttempt: 3 } as never)
      handle() {}
    }
    const error = await bootError([memory()], [Typo]);
    expect(error).toBeInstanceOf(OutboxOptionsError);
    expect((error as OutboxOptionsError).field).toBe('@OutboxHandler maxAttempt on Typo.handle');
    expect((error as Error).message).toMatch(/did you mean maxAttempts\?/);

    @Injectable()
    class IdemTypo {
      @OutboxHandler('a.b', { idempotency: { store: {} as never, doneTtl: 5 } as never })
      handle() {}
    }
    const idem = await bootError([memory()], [IdemTypo]);
    expect((idem as OutboxOptionsError).field).toBe(
      '@OutboxHandler idempotency.doneTtl on IdemTypo.handle',
    );
    expect((idem as Error).message).toMatch(/did you mean idempotency\.doneTtlMs\?/);
  });

  it('@Inbox options and messageId sources', async () => {
    @Injectable()
    class Consumer {
      @Inbox({ consumr: 'orders' } as never)
      handle() {}
    }
    const error = await bootError([InboxModule.forRoot({ dataSource: {} })], [Consumer]);
    expect(error).toBeInstanceOf(OutboxOptionsError);
    expect((error as OutboxOptionsError).field).toBe('@Inbox consumr');
    expect((error as Error).message).toMatch(/did you mean consumer\? \(on Consumer\.handle\)/);

    @Injectable()
    class Source {
      @Inbox({ messageId: { header: 'x-id', path: 'id' } as never })
      handle() {}
    }
    const source = await bootError([InboxModule.forRoot({ dataSource: {} })], [Source]);
    expect((source as OutboxOptionsError).field).toBe('@Inbox messageId.path');
  });

  it('InboxModule.forRoot options', async () => {
    const error = await bootError([
      InboxModule.forRoot({ dataSource: {}, lockTimeout: 5 } as never),
    ]);
    expect(error).toBeInstanceOf(OutboxOptionsError);
    expect((error as OutboxOptionsError).field).toBe('lockTimeout');
    expect((error as Error).message).toBe(
      'Invalid InboxModule option "lockTimeout": not an option; did you mean lockTimeoutMs?',
    );
  });

  it('InboxModule.forRoot / forRootAsync errors name InboxModule and the field as written', async () => {
    const typo = await bootError([InboxModule.forRoot({ dataSourceTokn: 'ds' } as never)]);
    expect(typo).toBeInstanceOf(OutboxOptionsError);
    expect((typo as Error).message).toBe(
      'Invalid InboxModule option "dataSourceTokn": not an option; did you mean dataSourceToken?',
    );
    const asyncTypo = await bootError([
      InboxModule.forRootAsync({ useFactory: () => ({ dataSourceTokn: 'ds' }) as never }),
    ]);
    expect((asyncTypo as Error).message).toBe((typo as Error).message);
    const none = await bootError([InboxModule.forRoot({})]);
    expect((none as OutboxOptionsError).field).toBe('dataSource');
    expect((none as Error).message).toMatch(
      /^Invalid InboxModule option "dataSource": .*set dataSource, dataSourceToken or executor/,
    );
    const range = await bootError([InboxModule.forRoot({ dataSource: {}, retentionMs: 0 })]);
    expect((range as Error).message).toBe(
      'Invalid InboxModule option "retentionMs": expected an integer ≥ 1, got 0',
    );
  });

  it("InboxModule's DataSource checked at bootstrap: the error names InboxModule and the option", async () => {
    @Injectable()
    class Consumer {
      @Inbox()
      handle() {}
    }
    const missing = await bootError(
      [InboxModule.forRoot({ dataSourceToken: 'NoSuchDataSource' })],
      [Consumer],
    );
    expect(missing).toBeInstanceOf(OutboxOptionsError);
    expect((missing as OutboxOptionsError).field).toBe('dataSourceToken');
    expect((missing as Error).message).toMatch(
      /^Invalid InboxModule option "dataSourceToken": @Inbox\(\) on Consumer\.handle: no provider/,
    );
    const notOne = await bootError([InboxModule.forRoot({ dataSource: {} })], [Consumer]);
    expect((notOne as Error).message).toMatch(/^Invalid InboxModule option "dataSource": /);
    // Given as OutboxModule's inbox, as before.
    const viaOutbox = await bootError(
      [
        OutboxModule.forRoot({
          store: { type: 'memory' },
          dispatcher: { enabled: false },
          inbox: { dataSourceToken: 'NoSuchDataSource' },
        }),
      ],
      [Consumer],
    );
    expect((viaOutbox as Error).message).toMatch(
      /^Invalid OutboxModule option "inbox\.dataSource": @Inbox\(\) on Consumer\.handle: no provider/,
    );
  });

  it('OutboxModule.forRoot({ inbox }) errors keep naming OutboxModule and inbox.<field>', async () => {
    const error = await bootError([
      OutboxModule.forRoot({
        store: { type: 'memory' },
        dispatcher: { enabled: false },
        inbox: { dataSourceTokn: 'ds' } as never,
      }),
    ]);
    expect(error).toBeInstanceOf(OutboxOptionsError);
    expect((error as Error).message).toBe(
      'Invalid OutboxModule option "inbox.dataSourceTokn": not an option; did you mean inbox.dataSourceToken?',
    );
  });

  it('OutboxAdminModule options and limits', async () => {
    expect(() =>
      resolveOutboxAdminOptions({ allowUnauthenticated: true, guard: [] } as never),
    ).toThrow('Invalid OutboxAdminModule option "guard": not an option; did you mean guards?');
    expect(() =>
      resolveOutboxAdminOptions({
        allowUnauthenticated: true,
        limits: { maxPagesize: 10 },
      } as never),
    ).toThrow(OutboxAdminOptionsError);
    const error = await bootError([
      memory(),
      OutboxAdminModule.register({ allowUnauthenticated: true, limit: {} } as never),
    ]);
    expect(error).toBeInstanceOf(OutboxAdminOptionsError);
    expect((error as OutboxAdminOptionsError).field).toBe('limit');
    expect((error as Error).message).toMatch(/did you mean limits\?/);
  });

  it('OutboxAdminModule extras (path, imports, ui) are still accepted', async () => {
    expect(
      await bootError([
        memory(),
        OutboxAdminModule.register({ allowUnauthenticated: true, path: 'ops', ui: false }),
      ]),
    ).toBeNull();
  });
});
