import { Injectable, Module } from '@nestjs/common';
import { ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import {
  MemoryOutboxStore,
  OUTBOX_DISPATCHER_INTERVAL,
  OutboxDispatcher,
  OutboxHandler,
  OutboxModule,
  OutboxModuleOptions,
  OutboxOptionsError,
  OutboxService,
} from 'nestjs-outbox';
import { resolveOutboxOptions } from '../lib/outbox-options';

async function boot(options: unknown, providers: any[] = [], withSchedule = true) {
  const moduleRef = await Test.createTestingModule({
    imports: [
      ...(withSchedule ? [ScheduleModule.forRoot()] : []),
      OutboxModule.forRoot(options as OutboxModuleOptions),
    ],
    providers,
  }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  await app.init();
  return app;
}

describe('OutboxModule bootstrap', () => {
  it.each([
    [{ store: { type: 'memory' }, dispatcher: { concurrency: 0 } }, 'dispatcher.concurrency'],
    [{ store: { type: 'memory' }, dispatcher: { leaseMs: 'long' } }, 'dispatcher.leaseMs'],
    [
      { store: { type: 'memory' }, dispatcher: { backoff: { jitter: 2 } } },
      'dispatcher.backoff.jitter',
    ],
    [
      { store: { type: 'memory' }, dispatcher: { backoff: { initialMs: 5000, maxMs: 10 } } },
      'dispatcher.backoff.maxMs',
    ],
    [{ store: { type: 'memory' }, dispatcher: { workerId: 'has spaces' } }, 'dispatcher.workerId'],
    [{ store: { type: 'memory' }, dispatcher: { wakeups: 'yes' } }, 'dispatcher.wakeups'],
    [{ store: { type: 'memory' }, limits: { payloadMaxBytes: -1 } }, 'limits.payloadMaxBytes'],
    [{ store: { type: 'memory' }, limits: { bogus: 1 } }, 'limits.bogus'],
    [{ store: { type: 'mongo' } }, 'store.type'],
    [{}, 'store.type'],
    [{ store: { type: 'custom' } }, 'store.store'],
    [{ store: { type: 'memory' }, retention: { deliveredMs: -5 } }, 'retention.deliveredMs'],
    [{ store: { type: 'memory' }, limits: { keyMaxLength: 1000 } }, 'limits.keyMaxLength'],
    [{ store: { type: 'memory' }, limits: { typeMaxLength: 256 } }, 'limits.typeMaxLength'],
  ])('fails bootstrap on bad options %j naming %s', async (options, field) => {
    const error = await boot(options).then(
      (app) => app.close().then(() => null),
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OutboxOptionsError);
    expect((error as OutboxOptionsError).field).toBe(field);
    expect((error as Error).message).toContain(field);
  });

  it.each([
    [
      { store: { type: 'memory' }, dispatcher: { pollIntervalMs: 100 } },
      'dispatcher.pollIntervalMs',
      'dispatcher.pollInterval',
    ],
    [{ store: { type: 'memory' }, dispatchr: {} }, 'dispatchr', 'dispatcher'],
    [
      { store: { type: 'memory', allowInProd: true } },
      'store.allowInProd',
      'store.allowInProduction',
    ],
    [
      { store: { type: 'custom', store: new MemoryOutboxStore(), clock: () => new Date() } },
      'store.clock',
      undefined,
    ],
    [
      { store: { type: 'typeorm', dataSource: {}, tablePrefx: 'o_' } },
      'store.tablePrefx',
      'store.tablePrefix',
    ],
    [
      { store: { type: 'redis', url: 'redis://x', keyPrefix: 'o' } },
      'store.keyPrefix',
      'store.prefix',
    ],
    [
      { store: { type: 'memory' }, dispatcher: { backoff: { initalMs: 5 } } },
      'dispatcher.backoff.initalMs',
      'dispatcher.backoff.initialMs',
    ],
    [
      { store: { type: 'memory' }, retention: { deliveredMS: 5 } },
      'retention.deliveredMS',
      'retention.deliveredMs',
    ],
    [
      { store: { type: 'memory' }, limits: { payloadMaxByte: 5 } },
      'limits.payloadMaxByte',
      'limits.payloadMaxBytes',
    ],
    [
      { store: { type: 'memory' }, inbox: { dataSource: {}, retention: 5 } },
      'inbox.retention',
      'inbox.retentionMs',
    ],
    [
      { store: { type: 'memory' }, metrics: { gaugeRefresh: 0 } },
      'metrics.gaugeRefresh',
      'metrics.gaugeRefreshMs',
    ],
    [{ store: { type: 'memory' }, logging: false }, 'logging', 'logs'],
  ])(
    'refuses an unknown option key %j naming %s and the closest option',
    async (options, field, closest) => {
      const error = await boot(options).then(
        (app) => app.close().then(() => null),
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(OutboxOptionsError);
      expect((error as OutboxOptionsError).field).toBe(field);
      expect((error as Error).message).toContain(
        closest
          ? `not an option; did you mean ${closest}?`
          : 'not an option; the options here are type, store',
      );
    },
  );

  it('does not walk into user objects given as options (DataSource, ioredis options, client, registry)', () => {
    const foreign = { anything: 1, nested: { more: true } };
    for (const store of [
      { type: 'typeorm', dataSource: foreign },
      { type: 'redis', url: 'redis://localhost', redisOptions: foreign },
      { type: 'redis', client: foreign },
      { type: 'custom', store: Object.assign(new MemoryOutboxStore(), foreign) },
    ]) {
      expect(() => resolveOutboxOptions({ store } as OutboxModuleOptions)).not.toThrow();
    }
    const registry = { registerMetric() {}, getSingleMetric() {}, anything: 1 };
    expect(() =>
      resolveOutboxOptions({ store: { type: 'memory' }, metrics: { registry } } as never),
    ).not.toThrow();
  });

  it('refuses an inbox lockTimeoutMs the databases cannot take (over 2^31 - 1 ms)', () => {
    const store = { type: 'memory' } as const;
    expect(() =>
      resolveOutboxOptions({
        store,
        inbox: { dataSourceToken: 'ds', lockTimeoutMs: 2_147_483_648 },
      } as never),
    ).toThrow(/inbox\.lockTimeoutMs.*from 1 to 2147483647/);
    expect(() =>
      resolveOutboxOptions({
        store,
        inbox: { dataSourceToken: 'ds', lockTimeoutMs: 2_147_483_647 },
      } as never),
    ).not.toThrow();
  });

  it.each(['postgres', 'postgresql', 'mysql', 'mariadb', 'sqlite', 'better-sqlite3'])(
    "store type '%s' points to type 'typeorm' with a dataSource",
    (type) => {
      expect(() => resolveOutboxOptions({ store: { type } } as never)).toThrow(
        /store\.type.*use \{ type: 'typeorm', dataSource \}/,
      );
    },
  );

  it('refuses the memory store under NODE_ENV=production unless allowed', async () => {
    const previous = process.env.NODE_ENV;
    process.env.NODE_ENV = 'production';
    try {
      await expect(boot({ store: { type: 'memory' } })).rejects.toThrow(
        /memory store .*production/,
      );
      // Every durable store is offered, node-postgres & co. ('sql') included.
      await expect(boot({ store: { type: 'memory' } })).rejects.toThrow(
        "use a durable store ({ type: 'typeorm' }, { type: 'sql' } or { type: 'redis' })",
      );
      const app = await boot({ store: { type: 'memory', allowInProduction: true } });
      await app.close();
    } finally {
      process.env.NODE_ENV = previous;
    }
  });

  it('fails bootstrap when two handlers share a name', async () => {
    @Injectable()
    class One {
      @OutboxHandler('a.b', { name: 'same' })
      handle() {}
    }
    @Injectable()
    class Two {
      @OutboxHandler('c.d', { name: 'same' })
      handle() {}
    }
    await expect(boot({ store: { type: 'memory' } }, [One, Two])).rejects.toThrow(
      /"same".*One\.handle.*Two\.handle/,
    );
  });

  it.each([
    ['a NUL', 'orders\u0000handler', /NUL character/],
    ['a lone UTF-16 surrogate', 'orders-\ud800', /lone UTF-16 surrogate/],
  ])('fails bootstrap on a handler name with %s', async (_what, name, reason) => {
    @Injectable()
    class Named {
      @OutboxHandler('a.b', { name })
      handle() {}
    }
    const error = await boot({ store: { type: 'memory' } }, [Named]).then(
      (app) => app.close().then(() => null),
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OutboxOptionsError);
    expect((error as OutboxOptionsError).field).toBe('@OutboxHandler name on Named.handle');
    expect((error as Error).message).toMatch(reason);
  });

  it('fails bootstrap with a clear hint when ScheduleModule is missing and the dispatcher is on', async () => {
    await expect(boot({ store: { type: 'memory' } }, [], false)).rejects.toThrow(
      /ScheduleModule\.forRoot\(\)/,
    );
    const app = await boot(
      { store: { type: 'memory' }, dispatcher: { enabled: false } },
      [],
      false,
    );
    await app.close();
  });

  it('registers its poll loop in SchedulerRegistry and removes it on close', async () => {
    const app = await boot({ store: { type: 'memory' } });
    const registry = app.get(SchedulerRegistry);
    expect(registry.doesExist('interval', OUTBOX_DISPATCHER_INTERVAL)).toBe(true);
    await app.close();
    expect(registry.doesExist('interval', OUTBOX_DISPATCHER_INTERVAL)).toBe(false);
  });

  it('stacks decorators: one method handling several types', async () => {
    const seen: string[] = [];
    @Injectable()
    class Multi {
      @OutboxHandler('x.one')
      @OutboxHandler(['x.two', 'x.three'])
      handle(event: { type: string }) {
        seen.push(event.type);
      }
    }
    const app = await boot({ store: { type: 'memory' }, dispatcher: { enabled: false } }, [Multi]);
    await app
      .get(OutboxService)
      .append(['x.one', 'x.two', 'x.three'].map((type) => ({ type, payload: null })));
    await app.get(OutboxDispatcher).drain();
    expect(seen.sort()).toEqual(['x.one', 'x.three', 'x.two']);
    await app.close();
  });

  it('supports forRootAsync with useFactory, useClass and isGlobal', async () => {
    const store = new MemoryOutboxStore();
    @Injectable()
    class Config {
      createOutboxOptions(): OutboxModuleOptions {
        return { store: { type: 'custom', store }, dispatcher: { enabled: false } };
      }
    }
    @Module({ providers: [Config], exports: [Config] })
    class ConfigModule {}

    @Injectable()
    class Consumer {
      constructor(readonly outbox: OutboxService) {}
    }
    @Module({ providers: [Consumer] })
    class FeatureModule {}

    for (const async of [
      {
        imports: [ConfigModule],
        inject: [Config],
        useFactory: (c: Config) => c.createOutboxOptions(),
      },
      { imports: [ConfigModule], useExisting: Config },
      { useClass: Config },
    ]) {
      const moduleRef = await Test.createTestingModule({
        imports: [OutboxModule.forRootAsync({ ...async, isGlobal: true }), FeatureModule],
      }).compile();
      const app = moduleRef.createNestApplication({ logger: false });
      await app.init();
      await app.get(Consumer).outbox.append({ type: 'async.ok', payload: {} });
      await app.close();
    }
    expect((await store.stats()).pending).toBe(3);
  });

  it('refuses unknown keys in async options too', async () => {
    const moduleRef = Test.createTestingModule({
      imports: [
        OutboxModule.forRootAsync({
          useFactory: () => ({ store: { type: 'memory' }, dispatcher: { batchsize: 5 } }) as never,
        }),
      ],
    });
    await expect(moduleRef.compile()).rejects.toThrow(
      'Invalid OutboxModule option "dispatcher.batchsize": not an option; did you mean dispatcher.batchSize?',
    );
  });

  it('rejects bad async options at bootstrap too', async () => {
    const moduleRef = Test.createTestingModule({
      imports: [
        OutboxModule.forRootAsync({
          useFactory: () => ({ store: { type: 'memory' }, dispatcher: { batchSize: 0 } }),
        }),
      ],
    });
    await expect(moduleRef.compile()).rejects.toThrow(/dispatcher\.batchSize/);
  });

  it('validates per-handler backoff at bootstrap and fills undefined fields from the defaults', async () => {
    @Injectable()
    class Bad {
      @OutboxHandler('bad.backoff', { backoff: { factor: 0.5 } })
      handle() {}
    }
    // The option's path, then where it is: as for every other @OutboxHandler option.
    await expect(boot({ store: { type: 'memory' } }, [Bad])).rejects.toMatchObject({
      field: '@OutboxHandler backoff.factor on Bad.handle',
    });
    @Injectable()
    class Typo {
      @OutboxHandler('typo.backoff', { backoff: { initalMs: 5 } as never })
      handle() {}
    }
    await expect(boot({ store: { type: 'memory' } }, [Typo])).rejects.toMatchObject({
      field: '@OutboxHandler backoff.initalMs on Typo.handle',
      message:
        'Invalid OutboxModule option "@OutboxHandler backoff.initalMs on Typo.handle": not an option; ' +
        'did you mean @OutboxHandler backoff.initialMs?',
    });
    const attempts: number[] = [];
    @Injectable()
    class Partial {
      // As when a config value is missing: undefined must not turn the delay into NaN.
      @OutboxHandler('partial.backoff', {
        maxAttempts: 2,
        backoff: { initialMs: undefined, jitter: 0 },
      })
      handle() {
        attempts.push(Date.now());
        throw new Error('again');
      }
    }
    let now = Date.parse('2026-06-01T00:00:00Z');
    const store = new MemoryOutboxStore({ clock: () => new Date(now) });
    const app = await boot({ store: { type: 'custom', store }, dispatcher: { enabled: false } }, [
      Partial,
    ]);
    await app.get(OutboxService).append({ type: 'partial.backoff', payload: {} });
    await app.get(OutboxDispatcher).drain();
    expect(await store.stats()).toMatchObject({ pending: 1, due: 0 });
    now += 1_000; // the default initialMs
    await app.get(OutboxDispatcher).drain();
    expect(attempts).toHaveLength(2);
    expect((await store.stats()).dead).toBe(1);
    await app.close();
  });
});
