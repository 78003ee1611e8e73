import { Module } from '@nestjs/common';
import { Transport } from '@nestjs/microservices';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { connect } from 'nats';
import { randomBytes, randomUUID } from 'node:crypto';
import {
  getOutboxRelayToken,
  MemoryOutboxStore,
  OutboxModule,
  OutboxRelay,
  OutboxRelayModule,
  OutboxService,
} from 'nestjs-outbox';
import { describeWithService, SERVICES } from '../support/services';
import { relaySuite } from './relay.suite';

const SERVER = `nats://${SERVICES.nats.host}:${SERVICES.nats.port}`;

async function until(check: () => Promise<boolean>, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}

describeWithService('nats', 'OutboxRelayModule over NATS (JetStream PubAck)', () => {
  relaySuite('nats');

  it('a subject no JetStream stream captures is never acknowledged: retried, dead-lettered when attempts run out, and delivered once replayed after the stream exists', async () => {
    const run = randomBytes(3).toString('hex');
    const type = `relay-nostream-${run}.created`;
    const store = new MemoryOutboxStore();
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          store: { type: 'custom', store },
          dispatcher: { pollInterval: 50, backoff: { initialMs: 50, jitter: 0 } },
        }),
        OutboxRelayModule.register({
          name: 'nostream',
          client: { transport: Transport.NATS, options: { servers: [SERVER] } },
          types: type,
          maxAttempts: 3,
          publishTimeoutMs: 2_000,
        }),
      ],
    })
    class App {}
    const app = (
      await Test.createTestingModule({ imports: [App] }).compile()
    ).createNestApplication({ logger: false });
    await app.init();
    const nc = await connect({ servers: SERVER });
    const jsm = await nc.jetstreamManager();
    try {
      const relay = app.get<OutboxRelay>(getOutboxRelayToken('nostream'));
      expect(relay.transport).toBe('nats');
      const id = randomUUID();
      await app.get(OutboxService).append({ id, type, payload: {} });
      await until(async () => (await store.stats()).dead === 1, 15_000);
      expect(relay.stats()).toMatchObject({ published: 0, failed: 3 });
      const dead = await store.listDeadLetters({ limit: 10 });
      expect(dead.items[0]).toMatchObject({
        eventId: id,
        handler: 'nostream',
        reason: 'exhausted',
      });

      await jsm.streams.add({
        name: `relay-nostream-${run}`,
        subjects: [`relay-nostream-${run}.>`],
      });
      expect(await store.replay({ ids: [dead.items[0].id] })).toBe(1);
      await until(async () => relay.stats().published === 1, 15_000);
      const stored = await jsm.streams.getMessage(`relay-nostream-${run}`, { seq: 1 });
      expect(stored.header.get('Nats-Msg-Id')).toBe(id);
      expect(JSON.parse(Buffer.from(stored.data).toString())).toMatchObject({
        pattern: type,
        data: { id, type },
      });
    } finally {
      await app.close();
      await jsm.streams.delete(`relay-nostream-${run}`).catch(() => undefined);
      await nc.close();
    }
  }, 40_000);
});
