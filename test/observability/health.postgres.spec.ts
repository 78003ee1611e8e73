import { Controller, Get, INestApplication, Injectable } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { DataSource } from 'typeorm';
import {
  NonRetryableError,
  OutboxDispatcher,
  OutboxHandler,
  OutboxHealthIndicator,
  OutboxModule,
  OutboxService,
} from 'nestjs-outbox';
import { describeWithService, SERVICES } from '../support/services';
import { dataSourceOptions, uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';
import { TcpProxy } from '../support/tcp-proxy';

@Injectable()
class Doomed {
  @OutboxHandler('doomed', { name: 'doomed' })
  run() {
    throw new NonRetryableError('never');
  }
}

@Controller('health')
class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly outbox: OutboxHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([
      () =>
        this.outbox.isHealthy('outbox', {
          timeoutMs: 500,
          maxOldestPendingAgeMs: 60_000,
          maxDeadLetters: 0,
        }),
    ]);
  }
}

describeWithService('postgres', 'OutboxHealthIndicator', () => {
  let proxy: TcpProxy;
  let dataSource: DataSource;
  let admin: DataSource;
  let app: INestApplication;
  const prefix = uniquePrefix('health');
  const table = (name: string) => `"${prefix}${name}"`;

  beforeAll(async () => {
    // The store talks to PostgreSQL through a proxy the test can cut; the shared server stays up.
    proxy = await TcpProxy.start(SERVICES.postgres);
    dataSource = await new DataSource({
      ...dataSourceOptions('postgres'),
      port: proxy.port,
      extra: { max: 4 },
    } as never).initialize();
    admin = await new DataSource(dataSourceOptions('postgres')).initialize();
    const moduleRef = await Test.createTestingModule({
      imports: [
        ScheduleModule.forRoot(),
        TerminusModule,
        OutboxModule.forRoot({
          store: { type: 'typeorm', dataSource, tablePrefix: prefix, ensureSchema: true },
          dispatcher: { enabled: false },
        }),
      ],
      controllers: [HealthController],
      providers: [Doomed],
    }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
  });

  afterAll(async () => {
    proxy.heal();
    await app?.close();
    for (const name of ['deliveries', 'dead_letters', 'events', 'schema_version']) {
      await admin.query(`DROP TABLE IF EXISTS ${table(name)} CASCADE`);
    }
    await dataSource?.destroy();
    await admin?.destroy();
    await proxy?.close();
  });

  const check = async () => {
    const res = await request(app.getHttpServer()).get('/health');
    return { code: res.status, outbox: res.body.details?.outbox ?? res.body.error?.outbox };
  };

  it('is up while the store answers, the schema is current and nothing lags or died', async () => {
    expect(await check()).toEqual({
      code: 200,
      outbox: {
        status: 'up',
        reasons: [],
        pending: 0,
        dead: 0,
        oldestPendingAgeMs: 0,
        schema: { current: 3, expected: 3 },
      },
    });
  });

  it('is down, within its timeout, while the store does not answer; up again once it does', async () => {
    proxy.blackhole();
    const started = Date.now();
    const down = await check();
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(down).toEqual({
      code: 503,
      outbox: { status: 'down', reasons: ['store unreachable: no answer within 500 ms'] },
    });
    proxy.heal();
    for (let i = 0; i < 50 && (await check()).code !== 200; i++) {
      await new Promise((r) => setTimeout(r, 100));
    }
    expect((await check()).outbox.status).toBe('up');
  });

  it('is down when the schema is behind, and when its version table is dropped', async () => {
    await admin.query(`UPDATE ${table('schema_version')} SET version = 2`);
    expect(await check()).toMatchObject({
      code: 503,
      outbox: {
        status: 'down',
        reasons: ['schema behind: version 2, this release needs 3'],
        schema: { current: 2, expected: 3 },
      },
    });
    await admin.query(`DROP TABLE ${table('schema_version')}`);
    expect(await check()).toMatchObject({
      code: 503,
      outbox: { status: 'down', reasons: ['schema missing: no outbox tables'] },
    });
    await admin.query(
      `CREATE TABLE ${table('schema_version')} (version integer NOT NULL, applied_at timestamptz NOT NULL)`,
    );
    await admin.query(`INSERT INTO ${table('schema_version')} VALUES (3, now())`);
    expect((await check()).code).toBe(200);
  });

  it('is down when a table the store reads is gone, naming the error', async () => {
    await admin.query(`ALTER TABLE ${table('deliveries')} RENAME TO "${prefix}deliveries_away"`);
    try {
      const down = await check();
      expect(down.code).toBe(503);
      expect(down.outbox.reasons).toEqual([
        expect.stringMatching(/^store check failed: .*deliveries.* does not exist/),
      ]);
    } finally {
      await admin.query(`ALTER TABLE "${prefix}deliveries_away" RENAME TO "${prefix}deliveries"`);
    }
  });

  it('is down when the oldest pending delivery is older than the threshold', async () => {
    // A type no worker handles yet waits (docs/guarantees.md, Guarantees 7); it ages by the store clock.
    await app.get(OutboxService).append({ type: 'unhandled.yet', payload: {} });
    await admin.query(
      `UPDATE ${table('deliveries')} SET available_at = now() - interval '10 minutes'`,
    );
    const down = await check();
    expect(down.code).toBe(503);
    expect(down.outbox.reasons).toEqual([
      expect.stringMatching(
        /^lagging: oldest pending delivery is 6\d{5} ms old \(over 60000 ms\)$/,
      ),
    ]);
    await admin.query(`DELETE FROM ${table('deliveries')}`);
    expect((await check()).code).toBe(200);
  });

  it('is down when dead letters exceed the threshold', async () => {
    await app.get(OutboxService).append({ type: 'doomed', payload: {} });
    await app.get(OutboxDispatcher).drain();
    expect(await check()).toMatchObject({
      code: 503,
      outbox: { status: 'down', reasons: ['dead letters: 1 (over 0)'], dead: 1 },
    });
  });
});
