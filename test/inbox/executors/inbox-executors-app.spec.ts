import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Body, Controller, INestApplication, Injectable, Module, Post } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import {
  Inbox,
  InboxContext,
  InboxInProgressError,
  InboxService,
  InboxTx,
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxService,
} from 'nestjs-outbox';
import { createDialect } from '../../../lib/stores/typeorm/dialects';
import { describeWithService, ServiceName } from '../../support/services';
import { uniquePrefix } from '../../stores/typeorm/typeorm-test-helpers';
import {
  ExecutorClient,
  ExecutorClientName,
  INBOX_APP_CLIENTS,
  openExecutorClient,
} from './executor-clients';

/**
 * `@Inbox()` over the 'sql' store's executor (node-postgres, Drizzle, Kysely, Prisma, MikroORM on PostgreSQL; mysql2 on MariaDB): the consumer writes
 * through its client's transaction object (`@InboxTx()`, `InboxContext.tx`), which commits or
 * rolls back together with the inbox record, and an `append()` without tx joins it.
 */

let client: ExecutorClient;
let effects = '';
let gate: Promise<void> = Promise.resolve();
let started: () => void = () => undefined;
const failOnce = new Set<string>();

const recordEffect = (tx: unknown, key: string, what: string) =>
  client.run(tx, `INSERT INTO ${effects} (k, what) VALUES ('${key}', '${what}')`);

@Controller('orders')
class OrdersController {
  constructor(private readonly inbox: InboxContext) {}

  @Post()
  @Inbox({ consumer: 'orders', duplicateResult: { status: 'duplicate' } })
  async place(@Body() body: { id: string; fail?: boolean }, @InboxTx() tx: unknown) {
    await recordEffect(tx, body.id, 'placed');
    if (body.fail && failOnce.delete(body.id)) throw new Error('after the write');
    return { status: 'placed' };
  }

  @Post('context')
  @Inbox({ consumer: 'context' })
  context(@InboxTx() tx: unknown) {
    let error = '';
    try {
      void this.inbox.manager;
    } catch (e) {
      error = (e as Error).message;
    }
    return { same: this.inbox.tx === tx, error };
  }

  @Post('slow')
  @Inbox({ consumer: 'slow-orders', lockTimeoutMs: 300, duplicateResult: { status: 'duplicate' } })
  async slow(@Body() body: { id: string }, @InboxTx() tx: unknown) {
    await recordEffect(tx, body.id, 'slow');
    started();
    await gate;
    return { status: 'placed' };
  }
}

@Injectable()
class Shipping {
  readonly followUps: string[] = [];

  constructor(
    private readonly outbox: OutboxService,
    private readonly inbox: InboxContext,
  ) {}

  @OutboxHandler('order.placed')
  @Inbox()
  async ship(event: OutboxEvent<{ id: string }>): Promise<void> {
    const { id } = event.payload;
    await recordEffect(this.inbox.tx, id, 'shipped');
    // No tx: it joins the inbox transaction.
    await this.outbox.append({ type: 'order.shipped', key: id, payload: { id } });
    if (failOnce.delete(`ship:${id}`)) throw new Error('ship fails after its append');
  }

  @OutboxHandler('order.shipped')
  followUp(event: OutboxEvent<{ id: string }>): void {
    this.followUps.push(event.payload.id);
  }
}

async function until(check: () => boolean | Promise<boolean>, ms = 8_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  return check();
}

const DATABASES = [
  ['postgres', INBOX_APP_CLIENTS],
  ['mariadb', ['mysql2']],
] as const satisfies ReadonlyArray<readonly [ServiceName, readonly ExecutorClientName[]]>;

describe.each(DATABASES)('%s', (service, clients) => {
  describeWithService(service, '@Inbox() through a non-TypeORM executor, in an app', () => {
    describe.each(clients as readonly ExecutorClientName[])('%s', (name) => {
      const prefix = uniquePrefix(`ixa${name.slice(0, 2).toLowerCase()}`);
      let app: INestApplication;

      beforeAll(async () => {
        client = await openExecutorClient(name);
        effects = `${prefix}effects`;
        await client.query(
          `CREATE TABLE ${effects} (k varchar(100) NOT NULL, what varchar(100) NOT NULL)`,
        );
        @Module({
          imports: [
            ScheduleModule.forRoot(),
            OutboxModule.forRoot({
              store: {
                type: 'sql',
                executor: client.executor,
                tablePrefix: prefix,
                ensureSchema: true,
              },
              dispatcher: { pollInterval: 50, backoff: { initialMs: 20, maxMs: 50, jitter: 0 } },
              retention: { cleanupIntervalMs: 0 },
              inbox: { cleanupIntervalMs: 0, retentionMs: 60_000 },
            }),
          ],
          controllers: [OrdersController],
          providers: [Shipping],
        })
        class ExecutorInboxApp {}
        const moduleRef = await Test.createTestingModule({ imports: [ExecutorInboxApp] }).compile();
        app = moduleRef.createNestApplication({ logger: false });
        await app.init();
      });

      afterAll(async () => {
        await app?.close();
        await client.query(`DROP TABLE IF EXISTS ${effects}`);
        await client.query(`DROP TABLE IF EXISTS ${prefix}inbox`);
        const { executor } = client;
        for (const ddl of createDialect(executor, { tablePrefix: prefix }).dropSchema()) {
          await client.query(ddl);
        }
        await client.close();
      });

      const post = (path: string, body: object, key: string) =>
        request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
      const count = async (key: string, what?: string) =>
        Number(
          (
            await client.query(
              `SELECT count(*) AS n FROM ${effects} WHERE k = '${key}'${what ? ` AND what = '${what}'` : ''}`,
            )
          )[0].n,
        );
      const inboxRecords = async (consumer: string) =>
        Number(
          (
            await client.query(
              `SELECT count(*) AS n FROM ${prefix}inbox WHERE consumer = '${consumer}'`,
            )
          )[0].n,
        );

      it('the inbox runs on the store executor: a request delivered twice has one effect', async () => {
        await post('/orders', { id: 'twice' }, 'k-twice').expect(201, { status: 'placed' });
        await post('/orders', { id: 'twice' }, 'k-twice').expect(201, { status: 'duplicate' });
        expect(await count('twice')).toBe(1);
        expect(await inboxRecords('orders')).toBe(1);
      });

      it('a consumer that throws after its write leaves neither the write nor the record; the redelivery runs it', async () => {
        failOnce.add('fails');
        const before = await inboxRecords('orders');
        await post('/orders', { id: 'fails', fail: true }, 'k-fails').expect(500);
        expect(await count('fails')).toBe(0);
        expect(await inboxRecords('orders')).toBe(before);
        await post('/orders', { id: 'fails', fail: true }, 'k-fails').expect(201, {
          status: 'placed',
        });
        expect(await count('fails')).toBe(1);
        expect(await inboxRecords('orders')).toBe(before + 1);
      });

      it('concurrent duplicates (same key, in parallel): one effect, the other a duplicate or 409', async () => {
        let release!: () => void;
        gate = new Promise((resolve) => (release = resolve));
        const first = new Promise<void>((resolve) => (started = resolve));
        const requests = [0, 1].map(() =>
          post('/orders/slow', { id: 'race' }, 'k-race').then((r) => r),
        );
        await first;
        // The other request is now waiting on the uncommitted claim (or about to): let it wait.
        await new Promise((resolve) => setTimeout(resolve, 100));
        release();
        const statuses = (await Promise.all(requests)).map((r) =>
          r.status === 201 ? (r.body as { status: string }).status : r.status,
        );
        expect(statuses).toContain('placed');
        expect(statuses.filter((s) => s === 'placed')).toHaveLength(1);
        expect(['duplicate', 409]).toContain(statuses.find((s) => s !== 'placed'));
        expect(await count('race')).toBe(1);
      });

      it('a duplicate waiting longer than lockTimeoutMs fails with InboxInProgressError (HTTP 409)', async () => {
        let release!: () => void;
        gate = new Promise((resolve) => (release = resolve));
        const first = new Promise<void>((resolve) => (started = resolve));
        const holder = post('/orders/slow', { id: 'held' }, 'k-held').then((r) => r);
        await first;
        try {
          const startedAt = Date.now();
          await post('/orders/slow', { id: 'held' }, 'k-held').expect(409);
          expect(Date.now() - startedAt).toBeLessThan(3_000);
          const held = await app
            .get(InboxService)
            .run({ consumer: 'direct', messageId: 'held' }, async () => {
              const waiting = app
                .get(InboxService)
                .run({ consumer: 'direct', messageId: 'held' }, async () => 'second', {
                  lockTimeoutMs: 200,
                })
                .catch((e: unknown) => e);
              return waiting;
            });
          expect(held.duplicate).toBe(false);
          const error = (held as { value: unknown }).value;
          expect(error).toBeInstanceOf(InboxInProgressError);
          expect(error).toMatchObject({
            consumer: 'direct',
            messageId: 'held',
            lockTimeoutMs: 200,
          });
        } finally {
          release();
        }
        expect((await holder).status).toBe(201);
        expect(await count('held')).toBe(1);
      });

      it('an outbox handler with @Inbox() appends a follow-up without tx: it commits with the inbox transaction', async () => {
        const outbox = app.get(OutboxService);
        const shipping = app.get(Shipping);
        await outbox.append({ type: 'order.placed', key: 'ship-1', payload: { id: 'ship-1' } });
        // The first attempt appends, then fails: its follow-up rolls back with it; the retry commits one.
        failOnce.add('ship:ship-2');
        await outbox.append({ type: 'order.placed', key: 'ship-2', payload: { id: 'ship-2' } });
        expect(
          await until(
            () => shipping.followUps.includes('ship-1') && shipping.followUps.includes('ship-2'),
          ),
        ).toBe(true);
        await app.get(OutboxDispatcher).drain();
        const followUps = async (id: string) =>
          Number(
            (
              await client.query(
                `SELECT count(*) AS n FROM ${prefix}events WHERE event_key = '${id}' AND type = 'order.shipped'`,
              )
            )[0].n,
          );
        expect(await followUps('ship-1')).toBe(1);
        expect(await followUps('ship-2')).toBe(1);
        expect(failOnce.has('ship:ship-2')).toBe(false);
        expect(await count('ship-2', 'shipped')).toBe(1);
        expect(shipping.followUps.filter((id) => id === 'ship-2')).toHaveLength(1);
      });

      it('InboxContext.tx is the @InboxTx() object; InboxContext.manager says to use tx (no TypeORM here)', async () => {
        const { body } = await post('/orders/context', {}, 'k-context').expect(201);
        expect(body).toEqual({
          same: true,
          error: expect.stringMatching(
            new RegExp(`runs on ${name}, not TypeORM.*InboxContext\\.tx`),
          ),
        });
      });

      it('the retention job deletes expired records through the executor', async () => {
        await client.query(
          `UPDATE ${prefix}inbox SET processed_at = ${client.executor.dialect === 'mysql' ? 'UTC_TIMESTAMP(3) - INTERVAL 2 MINUTE' : "now() - interval '2 minutes'"} WHERE consumer = 'orders'`,
        );
        const before = await inboxRecords('orders');
        expect(before).toBeGreaterThan(0);
        const results = await app.get(InboxService).cleanup();
        expect(results).toHaveLength(1);
        expect(results[0]).toMatchObject({ skipped: false, deleted: before });
        expect(await inboxRecords('orders')).toBe(0);
        expect(await inboxRecords('slow-orders')).toBeGreaterThan(0);
      });
    });
  });
});
