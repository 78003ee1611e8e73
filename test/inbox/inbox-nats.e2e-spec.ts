import { Controller, INestApplication, Inject, Injectable, Module } from '@nestjs/common';
import {
  ClientProxy,
  ClientsModule,
  MessagePattern,
  NatsRecordBuilder,
  Payload,
  Transport,
} from '@nestjs/microservices';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { headers as natsHeaders } from 'nats';
import { randomBytes } from 'node:crypto';
import { lastValueFrom, Observable, of } from 'rxjs';
import { DataSource, EntityManager } from 'typeorm';
import { OutboxEvent, OutboxHandler, OutboxModule, OutboxService } from 'nestjs-outbox';
import { Inbox, InboxManager, InboxService } from 'nestjs-outbox';
import { describeWithService, SERVICES } from '../support/services';
import { createEffectTable, openInboxDataSource, uniquePrefix } from './inbox-test-helpers';

const RUN = randomBytes(3).toString('hex');
const PLAYER_CREATED = `inbox-e2e-${RUN}.player.created`;
const WITH_HEADER = `inbox-e2e-${RUN}.with-header`;
const NATS = { servers: [`nats://${SERVICES.nats.host}:${SERVICES.nats.port}`] };
const EFFECTS = Symbol('EFFECTS');

interface PlayerCreated {
  id: string;
  name: string;
  failOnce?: boolean;
}

/** The producer side: an outbox handler that forwards each event to the broker twice, at once. */
@Injectable()
class Forwarder {
  /** Both replies of the last successful forward of each event. */
  readonly replies = new Map<string, unknown[]>();

  constructor(@Inject('BROKER') private readonly client: ClientProxy) {}

  @OutboxHandler('player.created')
  async forward(event: OutboxEvent<Omit<PlayerCreated, 'id'>>): Promise<void> {
    const message: PlayerCreated = { id: event.id, ...event.payload };
    const send = () => lastValueFrom(this.client.send(PLAYER_CREATED, message));
    this.replies.set(event.id, await Promise.all([send(), send()]));
  }
}

/** The consumer side: applies each player once and announces it in the same transaction. */
@Controller()
class PlayersConsumer {
  applied: string[] = [];
  private failed = new Set<string>();

  constructor(
    private readonly outbox: OutboxService,
    @Inject(EFFECTS) private readonly effects: { insertSql: string },
  ) {}

  @MessagePattern(PLAYER_CREATED)
  @Inbox({ duplicateResult: { duplicate: true } })
  async onPlayerCreated(
    @Payload() player: PlayerCreated,
    @InboxManager() manager: EntityManager,
  ): Promise<Observable<{ applied: string }>> {
    await manager.query(this.effects.insertSql, [player.id, player.name]);
    await this.outbox.append(
      { type: 'player.welcomed', payload: { playerId: player.id } },
      { manager },
    );
    if (player.failOnce && !this.failed.has(player.id)) {
      this.failed.add(player.id);
      throw new Error('consumer failed after its writes');
    }
    this.applied.push(player.id);
    // Microservice handlers may answer with an Observable; the inbox resolves it before commit.
    return of({ applied: player.id });
  }

  @MessagePattern(WITH_HEADER)
  @Inbox({
    messageId: { header: 'X-Message-Id' },
    consumer: 'header-consumer',
    // An RPC reply of `undefined` reaches the client as no value at all; answer something.
    duplicateResult: 'duplicate',
  })
  async withHeader(@Payload() data: { note: string }, @InboxManager() manager: EntityManager) {
    await manager.query(this.effects.insertSql, ['header', data.note]);
    return 'ok';
  }
}

/** Receives the follow-up events. */
@Injectable()
class Welcomer {
  welcomed: string[] = [];

  @OutboxHandler('player.welcomed')
  welcome(event: OutboxEvent<{ playerId: string }>): void {
    this.welcomed.push(event.payload.playerId);
  }
}

function sortReplies(replies: unknown[]): string[] {
  return replies.map((r) => JSON.stringify(r)).sort();
}

async function until(check: () => boolean | Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describeWithService(
  'nats',
  '@Inbox() end to end over NATS with the TypeORM store on PostgreSQL',
  () => {
    let dataSource: DataSource;
    let prefix: string;
    let app: INestApplication;
    let client: ClientProxy;
    let effects: Awaited<ReturnType<typeof createEffectTable>>;

    beforeAll(async () => {
      dataSource = await openInboxDataSource('postgres');
      prefix = uniquePrefix('nats');
      effects = await createEffectTable(dataSource, `${prefix}effects`);

      @Module({
        imports: [
          ScheduleModule.forRoot(),
          ClientsModule.register([{ name: 'BROKER', transport: Transport.NATS, options: NATS }]),
          OutboxModule.forRoot({
            // No `inbox` option: the inbox follows the TypeORM store (DataSource and table prefix).
            store: { type: 'typeorm', dataSource, tablePrefix: prefix },
            dispatcher: { pollInterval: 50, leaseMs: 5_000, backoff: { initialMs: 50, jitter: 0 } },
          }),
        ],
        controllers: [PlayersConsumer],
        providers: [Forwarder, Welcomer, { provide: EFFECTS, useValue: effects }],
      })
      class E2eModule {}

      const moduleRef = await Test.createTestingModule({ imports: [E2eModule] }).compile();
      app = moduleRef.createNestApplication({ logger: false });
      app.connectMicroservice(
        { transport: Transport.NATS, options: NATS },
        { inheritAppConfig: true },
      );
      await app.startAllMicroservices();
      await app.init();
      client = app.get('BROKER');
    });

    afterAll(async () => {
      await app?.close();
      if (dataSource?.isInitialized) {
        const tables: { tablename: string }[] = await dataSource.query(
          `SELECT tablename FROM pg_tables WHERE tablename LIKE $1`,
          [`${prefix}%`],
        );
        for (const { tablename } of tables)
          await dataSource.query(`DROP TABLE IF EXISTS "${tablename}" CASCADE`);
        await dataSource.destroy();
      }
    });

    it('applies each event once although it is sent twice, and delivers the follow-up appended in the same transaction', async () => {
      const outbox = app.get(OutboxService);
      const stored = await outbox.append(
        Array.from({ length: 5 }, (_, i) => ({
          type: 'player.created',
          payload: { name: `player-${i}`, failOnce: i === 0 },
        })),
      );
      const ids = stored.map((e) => e.id);
      const welcomer = app.get(Welcomer);
      await until(() => ids.every((id) => welcomer.welcomed.includes(id)));
      // Give a wrongly duplicated follow-up time to show up before counting.
      await new Promise((resolve) => setTimeout(resolve, 300));

      for (const id of ids) expect(await effects.count(id)).toBe(1);
      expect(welcomer.welcomed.sort()).toEqual([...ids].sort());
      expect(app.get(PlayersConsumer).applied.sort()).toEqual([...ids].sort());

      // Of the two concurrent sends of an event, one applied it and the other was a duplicate. The
      // forward of player-0 failed once (its consumer threw) and was retried, so the pair kept here
      // may hold the reply that applied it or only duplicates.
      const replies = app.get(Forwarder).replies;
      await until(() => replies.size === 5);
      for (const [i, id] of ids.entries()) {
        const pair = sortReplies(replies.get(id)!);
        if (i === 0) expect(pair).toContain(JSON.stringify({ duplicate: true }));
        else expect(pair).toEqual(sortReplies([{ applied: id }, { duplicate: true }]));
      }
      // The first attempt of player-0 failed after appending its follow-up: that append rolled back.
      expect(app.get(InboxService).stats()).toMatchObject({ processed: 5, failed: 1 });
    });

    it('reads the message id from a NATS header', async () => {
      const send = (id?: string) => {
        const h = natsHeaders();
        if (id) h.set('X-Message-Id', id);
        return lastValueFrom(
          client.send(
            WITH_HEADER,
            new NatsRecordBuilder({ note: `n-${RUN}` }).setHeaders(h).build(),
          ),
        );
      };
      await expect(send(`h-${RUN}`)).resolves.toBe('ok');
      await expect(send(`h-${RUN}`)).resolves.toBe('duplicate');
      const rows: { n: string }[] = await dataSource.query(
        `SELECT COUNT(*) AS n FROM ${effects.table} WHERE note = $1`,
        [`n-${RUN}`],
      );
      expect(Number(rows[0].n)).toBe(1);
    });

    it('answers a message without an id with an RPC error and applies nothing', async () => {
      await expect(
        lastValueFrom(client.send(PLAYER_CREATED, { name: 'anonymous' })),
      ).rejects.toMatchObject({
        message: expect.stringMatching(/payload path "id" is missing/),
      });
      await expect(
        lastValueFrom(
          client.send(
            WITH_HEADER,
            new NatsRecordBuilder({ note: 'no-id' }).setHeaders(natsHeaders()).build(),
          ),
        ),
      ).rejects.toMatchObject({
        message: expect.stringMatching(/header "X-Message-Id" is missing/),
      });
      const rows: { n: string }[] = await dataSource.query(
        `SELECT COUNT(*) AS n FROM ${effects.table} WHERE note IN ('anonymous', 'no-id')`,
      );
      expect(Number(rows[0].n)).toBe(0);
    });
  },
);
