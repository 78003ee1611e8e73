import { randomUUID } from 'node:crypto';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { AppendableEvent } from 'nestjs-outbox';
import { TypeOrmOutboxStore } from '../../../lib/stores/typeorm/internal';
import {
  PostgresWakeups,
  WAKEUP_APPLICATION_NAME,
  WAKEUP_LISTENERS_TTL_MS,
  WAKEUP_LISTENING_TTL_MS,
  wakeupChannel,
  wakeupListenerLock,
} from '../../../lib/stores/typeorm/dialects/postgres/wakeups';
import { describeWithService } from '../../support/services';
import { eventually } from '../../dispatcher/wake-test-helpers';
import { dataSourceOptions, openDataSource, storeFor, uniquePrefix } from './typeorm-test-helpers';

const event = (handlers: string[] = ['H']): AppendableEvent => ({
  id: randomUUID(),
  type: 't.wk',
  payload: {},
  key: null,
  headers: {},
  occurredAt: new Date(),
  availableAt: null,
  handlers,
});

describe('wakeupChannel', () => {
  it('is a lowercase identifier of at most 63 characters, distinct per schema and prefix', () => {
    const longest = wakeupChannel('p'.repeat(40), 's'.repeat(63));
    expect(longest.length).toBeLessThanOrEqual(63);
    for (const name of [longest, wakeupChannel('outbox_', null), wakeupChannel('Ab_', 'Sch')]) {
      expect(name).toMatch(/^[a-z_][a-z0-9_]*$/);
    }
    // Same readable part, different outboxes.
    expect(wakeupChannel('b_c_', 'a')).not.toBe(wakeupChannel('c_', 'a_b'));
    expect(wakeupChannel('outbox_', null)).not.toBe(wakeupChannel('outbox_', 'public'));
  });
});

function noChannel(dialect: 'sqlite' | 'mariadb') {
  it('publishes and listens to nothing, and installs nothing on the DataSource', async () => {
    const ds = await openDataSource(dialect);
    const h = await storeFor(ds, uniquePrefix('wks'));
    const subscribers = ds.subscribers.length;
    h.store.publishWakeups();
    const listener = jest.fn();
    const stop = h.store.onWakeup(listener);
    await h.store.append([event()]);
    expect(ds.subscribers.length).toBe(subscribers);
    expect(h.store.wakeupChannel).toBeNull();
    expect(listener).not.toHaveBeenCalled();
    await stop();
    await h.drop();
    await ds.destroy();
  });
}

describe('typeorm wake-ups [sqlite]: no channel', () => noChannel('sqlite'));
describeWithService('mariadb', 'typeorm wake-ups: no channel', () => noChannel('mariadb'));

function spyOptions() {
  const o = dataSourceOptions('postgres') as { host: string; port: number; database: string };
  return { host: o.host, port: o.port, user: 'postgres', database: o.database };
}

describe('PostgresWakeups: whether anyone listens (no database)', () => {
  /** A DataSource whose query runners answer the pg_locks look with `listening` (or fail). */
  function fakeDataSource(answer: () => boolean | Error) {
    const sent: string[] = [];
    let looks = 0;
    const ds = {
      createQueryRunner: () => ({
        query: async (text: string) => {
          if (text.includes('pg_locks')) {
            looks++;
            const a = answer();
            if (a instanceof Error) throw a;
            return [{ listening: a }];
          }
          sent.push(text);
          return [];
        },
        release: async () => undefined,
      }),
    };
    return { ds: ds as never, sent, looks: () => looks };
  }

  it('skips the NOTIFY while nobody listens, trusting "nobody" for a second and "someone" for 30 s', async () => {
    let listening = false;
    let now = 0;
    const f = fakeDataSource(() => listening);
    const w = new PostgresWakeups(
      f.ds,
      'p_',
      'public',
      () => undefined,
      () => now,
    );
    await Promise.all([w.notify(), w.notify(), w.notify()]); // one look for all three
    expect(f.looks()).toBe(1);
    expect(f.sent).toHaveLength(0);
    expect(w.counts).toEqual({ sent: 0, skipped: 3 });
    listening = true;
    now += WAKEUP_LISTENERS_TTL_MS - 1;
    await w.notify();
    expect(f.sent).toHaveLength(0); // "nobody" still trusted
    now += 1;
    await w.notify();
    expect(f.looks()).toBe(2);
    expect(f.sent).toHaveLength(1);
    listening = false;
    now += WAKEUP_LISTENING_TTL_MS - 1;
    await w.notify(); // "someone" still trusted: sent to nobody, harmless
    expect(f.sent).toHaveLength(2);
    now += 1;
    await w.notify();
    expect(f.looks()).toBe(3);
    expect(f.sent).toHaveLength(2);
  });

  it('sends when the look fails, reporting the error once per look', async () => {
    let now = 0;
    const errors: unknown[] = [];
    const f = fakeDataSource(() => new Error('permission denied for pg_locks'));
    const w = new PostgresWakeups(
      f.ds,
      'p_',
      'public',
      (e) => errors.push(e),
      () => now,
    );
    await Promise.all([w.notify(), w.notify()]);
    await w.notify();
    expect(f.sent).toHaveLength(3);
    expect(errors).toHaveLength(1);
    now += WAKEUP_LISTENING_TTL_MS;
    await w.notify();
    expect(errors).toHaveLength(2);
  });
});

describeWithService('postgres', 'typeorm wake-ups', () => {
  let ds: DataSource;
  let h: Awaited<ReturnType<typeof storeFor>>;
  let spy: Client;
  const received: number[] = [];

  beforeAll(async () => {
    ds = await openDataSource('postgres');
    h = await storeFor(ds, uniquePrefix('wkp'));
    spy = new Client(spyOptions());
    await spy.connect();
    const channel = (await h.store.resolveWakeupChannel())!;
    spy.on('notification', (m) => {
      if (m.channel === channel) received.push(Date.now());
    });
    await spy.query(`LISTEN "${channel}"`);
    // Listening as a dispatcher does: producers signal only while someone holds this lock.
    await spy.query('SELECT pg_advisory_lock_shared($1, $2)', wakeupListenerLock(channel));
    h.store.publishWakeups();
  });
  afterAll(async () => {
    await spy.end();
    await h.store.close();
    await h.drop();
    await ds.destroy();
  });
  beforeEach(() => (received.length = 0));

  it('signals once its own transaction committed', async () => {
    await h.store.append([event()]);
    expect(await eventually(() => received.length === 1, 2_000)).toBe(true);
  });

  it('signals for the caller’s transaction when it commits, not before; a rollback signals nothing', async () => {
    await ds.transaction(async (manager) => {
      await h.store.append([event()], { manager });
      await new Promise((r) => setTimeout(r, 100));
      expect(received).toHaveLength(0);
    });
    expect(await eventually(() => received.length === 1, 2_000)).toBe(true);
    received.length = 0;
    await ds
      .transaction(async (manager) => {
        await h.store.append([event()], { manager });
        throw new Error('roll back');
      })
      .catch(() => undefined);
    await new Promise((r) => setTimeout(r, 200));
    expect(received).toHaveLength(0);
  });

  it('coalesces: 200 appends from 8 clients send far fewer signals', async () => {
    let next = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next++ < 200) await h.store.append([event()]);
      }),
    );
    await new Promise((r) => setTimeout(r, 100));
    expect(received.length).toBeGreaterThanOrEqual(1);
    expect(received.length).toBeLessThan(200 / 2);
  });

  it('a wake-up makes the next claim look for placeholders at once (no quiet period)', async () => {
    await h.empty();
    // The worker is another store on its own DataSource, as in another process.
    const workerDs = await openDataSource('postgres');
    const worker = new TypeOrmOutboxStore(workerDs, { tablePrefix: h.tables.prefix });
    const request = {
      workerId: 'w',
      handlers: [{ name: 'H', types: ['t.wk'] }],
      limit: 10,
      leaseMs: 30_000,
    };
    let wakes = 0;
    const stop = worker.onWakeup(() => wakes++);
    try {
      // Connected, and its second look a listener TTL later.
      expect(await eventually(() => wakes === 2, 5_000)).toBe(true);
      expect(await worker.claim(request)).toHaveLength(0); // an empty probe: quiet period
      const [appended] = await h.store.append([event([])]); // no local handler: a placeholder
      expect(await eventually(() => wakes === 3, 2_000)).toBe(true);
      const claimed = await worker.claim(request);
      expect(claimed.map((c) => c.event.id)).toEqual([appended.id]);
    } finally {
      await stop();
      await workerDs.destroy();
    }
  });

  it('a store does not wake itself (its dispatcher heard in-process), other stores it does', async () => {
    const otherDs = await openDataSource('postgres');
    const other = new TypeOrmOutboxStore(otherDs, { tablePrefix: h.tables.prefix });
    let own = 0;
    let others = 0;
    const stopOwn = h.store.onWakeup(() => own++);
    const stopOther = other.onWakeup(() => others++);
    try {
      // Connected, and each listener's second look a listener TTL later.
      expect(await eventually(() => own === 2 && others === 2, 5_000)).toBe(true);
      await h.store.append([event()]);
      expect(await eventually(() => others === 3, 2_000)).toBe(true);
      expect(received.length).toBeGreaterThanOrEqual(1); // it was sent
      await new Promise((r) => setTimeout(r, 100));
      expect(own).toBe(2);
    } finally {
      await stopOwn();
      await stopOther();
      await otherDs.destroy();
    }
  });

  it('the NOTIFY skips the WAL flush in its own transaction only: the pooled connection keeps synchronous_commit on', async () => {
    // One pooled connection, so the NOTIFY and the checks below share it.
    const single = await openDataSource('postgres', { max: 1 });
    const store = new TypeOrmOutboxStore(single, { tablePrefix: h.tables.prefix });
    try {
      store.publishWakeups();
      await store.append([event()]);
      expect(await eventually(() => received.length === 1, 2_000)).toBe(true);
      expect(await single.query('SHOW synchronous_commit')).toEqual([{ synchronous_commit: 'on' }]);
      // A business transaction after it still waits for its flush (the setting did not leak).
      await single.transaction(async (manager) => {
        expect(await manager.query('SHOW synchronous_commit')).toEqual([
          { synchronous_commit: 'on' },
        ]);
      });
    } finally {
      await store.close();
      await single.destroy();
    }
  });

  it('the NOTIFY runs on a connection of its own even where DataSource.query is routed into an open transaction (as typeorm-transactional does)', async () => {
    const routed = await openDataSource('postgres');
    const store = new TypeOrmOutboxStore(routed, { tablePrefix: h.tables.prefix });
    const business = routed.createQueryRunner();
    await business.connect();
    await business.startTransaction();
    const query = routed.query.bind(routed);
    (routed as unknown as { query: typeof routed.query }).query = (text, params, runner) =>
      query(text, params, runner ?? business);
    try {
      store.publishWakeups();
      await store.append([event()]);
      expect(await eventually(() => received.length === 1, 2_000)).toBe(true);
      // The app's transaction still waits for its WAL flush at commit.
      expect(await business.query('SHOW synchronous_commit')).toEqual([
        { synchronous_commit: 'on' },
      ]);
    } finally {
      await business.rollbackTransaction();
      await business.release();
      await store.close();
      await routed.destroy();
    }
  });

  it('sends no NOTIFY while no other process listens (only its own dispatcher), and does once another one does', async () => {
    // An outbox of its own (its own channel), watched by a bare LISTEN that producers cannot see.
    const prefix = uniquePrefix('wkq');
    const own = await storeFor(ds, prefix);
    const producer = own.store;
    const watch = new Client(spyOptions());
    const heard: number[] = [];
    await watch.connect();
    watch.on('notification', () => heard.push(Date.now()));
    await watch.query(`LISTEN "${await producer.resolveWakeupChannel()}"`);
    const appendSpaced = async (n: number) => {
      for (let i = 0; i < n; i++) {
        await producer.append([event()]);
        await new Promise((r) => setTimeout(r, 20)); // past the 5 ms coalescing window
      }
    };
    const otherDs = await openDataSource('postgres');
    const other = new TypeOrmOutboxStore(otherDs, { tablePrefix: prefix });
    let ownWakes = 0;
    let otherWakes = 0;
    producer.publishWakeups();
    const stopOwn = producer.onWakeup(() => ownWakes++);
    try {
      expect(await eventually(() => ownWakes === 1, 5_000)).toBe(true); // its own listener
      await appendSpaced(5);
      await new Promise((r) => setTimeout(r, 200));
      expect(heard).toHaveLength(0);

      // Another process starts listening: within the look-up interval, signals go out again.
      const stopOther = other.onWakeup(() => otherWakes++);
      expect(await eventually(() => otherWakes === 1, 5_000)).toBe(true);
      await new Promise((r) => setTimeout(r, WAKEUP_LISTENERS_TTL_MS + 100));
      await appendSpaced(3);
      expect(await eventually(() => otherWakes >= 2 && heard.length >= 1, 2_000)).toBe(true);

      // (Once it stops, producers keep signalling until their "someone listens" expires: the
      // no-database tests above show both lifetimes.)
      await stopOther();
      expect(ownWakes).toBe(2); // connected, and its look a listener TTL later: no signal
    } finally {
      await stopOwn();
      await producer.close();
      await watch.end();
      await otherDs.destroy();
      await own.drop();
    }
  });

  it('a listener that reconnects looks again once producers have seen its lock: what committed between is claimed without a signal', async () => {
    const prefix = uniquePrefix('wkr');
    const own = await storeFor(ds, prefix);
    const producer = own.store;
    const workerDs = await openDataSource('postgres');
    const worker = new TypeOrmOutboxStore(workerDs, { tablePrefix: prefix });
    const [classid, objid] = wakeupListenerLock((await producer.resolveWakeupChannel())!);
    const holders = `FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND classid = $1::oid AND objid = $2::oid`;
    const keys = [String(classid), String(objid)];
    const held = async () =>
      Number((await ds.query(`SELECT count(*)::int AS n ${holders}`, keys))[0].n);
    let wakes = 0;
    producer.publishWakeups();
    const stop = worker.onWakeup(() => wakes++);
    try {
      expect(await eventually(() => wakes === 2, 5_000)).toBe(true); // connected + its second look
      await ds.query(`SELECT pg_terminate_backend(pid) ${holders}`, keys);
      expect(await eventually(async () => (await held()) === 0, 2_000)).toBe(true);
      // The producer looks while nobody listens: "nobody" for a listener TTL.
      await producer.append([event()]);
      expect(await eventually(async () => (await held()) === 1, 3_000)).toBe(true);
      expect(await eventually(() => wakes === 3, 2_000)).toBe(true); // reconnected: claims at once
      const afterReconnect = Date.now();
      await producer.append([event()]); // committed after it listens again; no NOTIFY is sent
      expect(await eventually(() => wakes === 4, WAKEUP_LISTENERS_TTL_MS + 1_000)).toBe(true);
      expect(Date.now() - afterReconnect).toBeLessThan(WAKEUP_LISTENERS_TTL_MS + 1_000);
    } finally {
      await stop();
      await producer.close();
      await worker.close();
      await workerDs.destroy();
      await own.drop();
    }
  }, 20_000);

  it('close() stops listening and leaves nothing on the DataSource', async () => {
    const other = new TypeOrmOutboxStore(ds, { tablePrefix: h.tables.prefix });
    const before = ds.subscribers.length;
    other.publishWakeups();
    let wakes = 0;
    other.onWakeup(() => wakes++);
    expect(await eventually(() => wakes === 1, 5_000)).toBe(true);
    // Its listening connection, seen by its name and the channel's listener lock.
    const [classid, objid] = wakeupListenerLock((await other.resolveWakeupChannel())!);
    const listening = async () =>
      Number(
        (
          await ds.query(
            `SELECT count(*)::int AS n FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
             WHERE a.application_name = $1 AND l.locktype = 'advisory' AND l.objsubid = 2
               AND l.classid = $2::oid AND l.objid = $3::oid`,
            [WAKEUP_APPLICATION_NAME, String(classid), String(objid)],
          )
        )[0].n,
      );
    expect(await listening()).toBe(1);
    expect(ds.subscribers.length).toBe(before + 1);
    await other.close();
    expect(ds.subscribers.length).toBe(before);
    expect(await eventually(async () => (await listening()) === 0, 2_000)).toBe(true);
  });
});
