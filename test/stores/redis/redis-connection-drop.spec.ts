import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import Redis from 'ioredis';
import { OutboxEvent, OutboxEventInput, OutboxHandler } from 'nestjs-outbox';
import { RedisOutboxStore } from '../../../lib/stores/redis';
import { createOutboxApp, TestApp } from '../../support/outbox-app';
import { describeWithService } from '../../support/services';
import { connect, dropPrefix, uniquePrefix } from './redis-test-support';

const EVENTS = 1_000;
const seen = new Set<string>();

@Injectable()
class Recorder {
  @OutboxHandler('drop.test')
  handle(event: OutboxEvent) {
    seen.add(event.id);
  }
}

describeWithService('redis', 'Redis store when its connection is killed mid-run', () => {
  let client: Redis;
  let admin: Redis;
  let prefix: string;
  let t: TestApp | undefined;

  beforeEach(() => {
    client = connect();
    admin = connect();
    prefix = uniquePrefix('drop');
    seen.clear();
  });
  afterEach(async () => {
    await t?.app.close();
    await dropPrefix(admin, prefix);
    await Promise.all([client.quit(), admin.quit()]);
  });

  it('keeps appending and dispatching through CLIENT KILL and loses nothing', async () => {
    t = await createOutboxApp([Recorder], {
      module: { store: { type: 'redis', client, prefix } },
      dispatcher: {
        pollInterval: 20,
        leaseMs: 1_000,
        batchSize: 50,
        storeErrorBackoffMs: 50,
        storeErrorMaxBackoffMs: 200,
      },
    });
    const events: OutboxEventInput[] = Array.from({ length: EVENTS }, (_, i) => ({
      id: randomUUID(),
      type: 'drop.test',
      payload: { i },
      key: i % 4 === 0 ? `k${i % 10}` : null,
    }));

    let reconnects = 0;
    client.on('reconnecting', () => reconnects++);
    let kills = 0;
    const killer = (async () => {
      for (let i = 0; i < 4; i++) {
        await new Promise((r) => setTimeout(r, 150));
        const id = await client.client('ID');
        kills += Number(await admin.client('KILL', 'ID', String(id)));
      }
    })();

    for (let i = 0; i < events.length; i += 25) {
      // An append whose reply was lost may or may not have been written: retrying with the same
      // ids is safe because append is idempotent (docs/guarantees.md, Guarantees 10).
      for (;;) {
        try {
          await t.outbox.append(events.slice(i, i + 25));
          break;
        } catch {
          await new Promise((r) => setTimeout(r, 20));
        }
      }
      await new Promise((r) => setTimeout(r, 5));
    }
    await killer;
    expect(kills).toBe(4);

    const deadline = Date.now() + 30_000;
    while (seen.size < EVENTS && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(seen.size).toBe(EVENTS);
    // The last kill's close event may still be on its way when everything is already delivered.
    while (reconnects < 4 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(reconnects).toBeGreaterThanOrEqual(4);
    expect(events.every((e) => seen.has(e.id!))).toBe(true);

    const store = new RedisOutboxStore({ client: admin, prefix });
    const deadline2 = Date.now() + 10_000;
    let stats = await store.stats();
    while ((stats.pending || stats.leased) && Date.now() < deadline2) {
      await new Promise((r) => setTimeout(r, 50));
      stats = await store.stats();
    }
    expect(stats).toMatchObject({ pending: 0, leased: 0, dead: 0 });
    expect(t.dispatcher.stats().failed).toBe(0);
  }, 60_000);
});
