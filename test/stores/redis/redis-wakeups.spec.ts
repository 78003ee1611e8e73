import { randomUUID } from 'node:crypto';
import { AppendableEvent } from 'nestjs-outbox';
import { RedisOutboxStore } from '../../../lib/stores/redis/redis-outbox.store';
import { describeWithService } from '../../support/services';
import { eventually } from '../../dispatcher/wake-test-helpers';
import { connect, dropPrefix, uniquePrefix } from './redis-test-support';

const event = (): AppendableEvent => ({
  id: randomUUID(),
  type: 't.wk',
  payload: {},
  key: null,
  headers: {},
  occurredAt: new Date(),
  availableAt: null,
  handlers: ['H'],
});

describeWithService('redis', 'redis store wake-ups', () => {
  const prefix = uniquePrefix('wk');
  const clients = [connect(), connect()];
  const [a, b] = clients.map((client) => new RedisOutboxStore({ client, prefix }));
  afterAll(async () => {
    await Promise.all([a.close(), b.close()]);
    await dropPrefix(clients[0], prefix);
    for (const c of clients) c.disconnect();
  });

  it('publishes under the hash tag; other stores wake, the appending store does not wake itself', async () => {
    expect(a.wakeupChannel).toBe(`{${prefix}}:wake`);
    a.publishWakeups();
    let own = 0;
    let other = 0;
    a.onWakeup(() => own++);
    b.onWakeup(() => other++);
    expect(await eventually(() => own === 1 && other === 1, 5_000)).toBe(true); // subscribed
    await a.append([event()]);
    expect(await eventually(() => other === 2, 2_000)).toBe(true);
    await new Promise((r) => setTimeout(r, 100));
    expect(own).toBe(1);
  });

  it('without publishWakeups an append sends nothing', async () => {
    let heard = 0;
    a.onWakeup(() => heard++);
    expect(await eventually(() => heard === 1, 5_000)).toBe(true);
    await b.append([event()]);
    await new Promise((r) => setTimeout(r, 200));
    expect(heard).toBe(1);
  });

  it('a subscription stopped twice (the store closing, then its dispatcher) closes once, leaving no timer', async () => {
    // Two apps sharing one store: closing the first closes the store, which stops the second
    // app's subscription; the second app's dispatcher then stops it again. The second QUIT used
    // to fail on the closing connection, and the disconnect that followed left ioredis' 2 s
    // timer keeping the process alive.
    const client = connect();
    const store = new RedisOutboxStore({ client, prefix });
    try {
      let heard = 0;
      const stop = store.onWakeup(() => heard++);
      expect(await eventually(() => heard === 1, 5_000)).toBe(true); // subscribed
      const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
      const before = timers();
      await store.close();
      await stop();
      await new Promise((r) => setImmediate(r));
      expect(timers()).toBeLessThanOrEqual(before);
    } finally {
      client.disconnect();
    }
  });

  it('a store that owns its client, closed twice, leaves no timer', async () => {
    const store = new RedisOutboxStore({ client: connect(), prefix, ownsClient: true });
    let heard = 0;
    store.onWakeup(() => heard++);
    expect(await eventually(() => heard === 1, 5_000)).toBe(true); // connected and subscribed
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const before = timers();
    await Promise.all([store.close(), store.close()]);
    await store.close();
    await new Promise((r) => setImmediate(r));
    expect(timers()).toBeLessThanOrEqual(before);
  });

  it('a subscription stopped while it still connects leaves no timer', async () => {
    // Stopped during ioredis' ready check, a QUIT closed the socket under the check, whose
    // failure then disconnected the closed connection again and armed the 2 s timer.
    const client = connect();
    const store = new RedisOutboxStore({ client, prefix });
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    try {
      await client.ping();
      const before = timers();
      for (let delay = 0; delay < 12; delay++) {
        const stop = store.onWakeup(() => undefined);
        await new Promise((r) => setTimeout(r, delay / 2));
        await stop();
      }
      await new Promise((r) => setTimeout(r, 50));
      expect(timers()).toBeLessThanOrEqual(before);
    } finally {
      await store.close();
      client.disconnect();
    }
  });
});
