import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import Redis from 'ioredis';
import { luaScript } from '../../../lib/stores/redis/redis-client';
import {
  LUA_DIR,
  REDIS_SCRIPT_FILES,
  REDIS_SCRIPTS,
  RedisScriptName,
} from '../../../lib/stores/redis/redis-scripts';
import { describeWithService } from '../../support/services';
import { connect, dropPrefix, uniquePrefix } from './redis-test-support';

/**
 * Each Lua script on its own, as Redis runs it: loaded with SCRIPT LOAD and called by EVALSHA with
 * the keys and arguments the store passes (redis-outbox.store.ts), checking the reply's shape and
 * what the script did to the keys. The store's own specs test the behaviour through the store.
 */

/** The leading comment block of a Lua file. */
const headerOf = (text: string) => text.slice(0, text.search(/^(?!--)/m));

/** ARGV[n] a script's own text reads, n ≥ 2 (ARGV[1] is the prelude's). */
const argvRead = (code: string) =>
  [...code.matchAll(/ARGV\[(\d+)\]/g)].map((m) => Number(m[1])).filter((n) => n >= 2);

/** Whether the header names ARGV[n], alone or in a range `ARGV[a..b]` / `ARGV[a..]`. */
const names = (header: string, n: number) =>
  [...header.matchAll(/^-- ARGV\[(\d+)(\.\.(\d*))?\]/gm)].some(([, a, range, b]) => {
    if (!range) return Number(a) === n;
    return n >= Number(a) && (b === '' || n <= Number(b));
  });

describe('Redis Lua files', () => {
  const files = readdirSync(LUA_DIR).filter((f) => f.endsWith('.lua'));
  const read = (name: string) => readFileSync(join(LUA_DIR, `${name}.lua`), 'utf8');
  const used = Object.values(REDIS_SCRIPT_FILES).flat();

  it('are the prelude and the files of the scripts, none unused, none missing', () => {
    expect(files.sort()).toEqual(
      [...new Set(['prelude', ...used])].map((name) => `${name}.lua`).sort(),
    );
    expect(readdirSync(LUA_DIR).filter((f) => !f.endsWith('.lua'))).toEqual([]);
  });

  it.each(Object.entries(REDIS_SCRIPT_FILES))(
    '%s: its own file has a header naming KEYS[1], every ARGV it reads and its reply',
    (_name, parts) => {
      const text = read(parts[parts.length - 1]);
      const header = headerOf(text);
      expect(header).toMatch(/^-- KEYS\[1\] /m);
      expect(header).toMatch(/^-- ARGV\[1\] /m);
      expect(header).toMatch(/^-- Returns /m);
      const code = text.slice(header.length);
      for (const n of argvRead(code))
        expect({ n, named: names(header, n) }).toEqual({ n, named: true });
    },
  );

  it('fragments say what they define and which scripts include them', () => {
    const fragments = [...new Set(used)].filter((f) =>
      Object.values(REDIS_SCRIPT_FILES).some((p) => {
        const at = p.indexOf(f as never);
        return at >= 0 && at < p.length - 1;
      }),
    );
    expect(fragments.sort()).toEqual(['ack-one', 'dead-view', 'delivery-view']);
    for (const fragment of fragments) {
      const header = headerOf(read(fragment));
      expect(header).toMatch(/^-- Fragment of .*Defines:/s);
      const users = Object.values(REDIS_SCRIPT_FILES)
        .filter((p) => p.includes(fragment as never))
        .map((p) => `${p[p.length - 1]}.lua`);
      for (const user of users) expect(header).toContain(user);
    }
    const prelude = headerOf(read('prelude'));
    expect(prelude).toMatch(/^-- KEYS\[1\] /m);
    expect(prelude).toMatch(/^-- ARGV\[1\] /m);
  });
});

describeWithService('redis', 'Redis scripts through EVALSHA', () => {
  let client: Redis;
  let prefix: string;
  const sha = {} as Record<RedisScriptName, string>;
  /** Key name under this test's base. */
  const key = (suffix: string) => `{${prefix}}:${suffix}`;
  const run = (name: RedisScriptName, ...args: (string | number)[]) =>
    client.evalsha(sha[name], 1, key('seq'), key(''), ...args) as Promise<any>;

  /** The append arguments the store sends for events (no stage). */
  const appendArgs = (
    events: { id: string; key?: string; handlers?: string[]; pl?: string; av?: number }[],
  ) => {
    const args: (string | number)[] = ['', events.length];
    for (const e of events) {
      const handlers = e.handlers ?? ['A'];
      args.push(e.id, 't', e.key ? `+${e.key}` : '-', e.pl ?? '{"n":1}', '{}', 1000);
      args.push(e.av ?? '', `c-${e.id}`, handlers.length, ...handlers);
    }
    return args;
  };
  /** The claim arguments the store sends: handler A takes type t. */
  const claimArgs = (token: string, limit = 10, leaseMs = 60_000) =>
    ['w1', leaseMs, limit, token, 500, 1, 'A', 1, 't', 1, 'A'] as (string | number)[];
  /** Deliveries of a claim reply (10 values each). */
  const deliveries = (reply: [number, ...string[]]) => {
    const flat = reply.slice(1).flatMap((chunk) => JSON.parse(chunk as string) as unknown[]);
    const out: unknown[][] = [];
    for (let i = 0; i < flat.length; i += 10) out.push(flat.slice(i, i + 10));
    return out;
  };
  const errorArgs = ['"Error"', '"boom"', 1, '"w1"', 10];
  const filterAll = ['-inf', '+inf', '', '', '-', '-', '-'];
  /** Appends events and claims them; returns the delivery ids in claim order. */
  const appendAndClaim = async (n: number, token: string) => {
    const events = Array.from({ length: n }, () => ({ id: randomUUID() }));
    await run('append', ...appendArgs(events));
    const reply = await run('claim', ...claimArgs(token));
    return { events, ids: deliveries(reply).map((d) => d[0] as string), reply };
  };
  const counters = async () => client.hgetall(key('cnt'));
  /** Waits until the Redis clock has passed ms (retention cutoffs are exclusive). */
  const clockPast = async (ms: number) => {
    while (Number(await run('now')) <= ms) await new Promise((r) => setTimeout(r, 2));
  };

  beforeAll(async () => {
    client = connect();
    for (const [name, src] of Object.entries(REDIS_SCRIPTS)) {
      const loaded = (await client.script('LOAD', src)) as string;
      // The client runs a script by the SHA it computes itself: Redis must agree.
      expect(loaded).toBe(luaScript(src).sha);
      sha[name as RedisScriptName] = loaded;
    }
  });
  beforeEach(() => {
    prefix = uniquePrefix('lua');
  });
  afterEach(() => dropPrefix(client, prefix));
  afterAll(() => client.quit());

  it('now: the Redis clock in ms', async () => {
    const now = Number(await run('now'));
    expect(Math.abs(now - Date.now())).toBeLessThan(5_000);
  });

  it('append: writes the event, its delivery, the queues and counters; a repeat is a no-op; other content is DUP', async () => {
    const id = randomUUID();
    const reply = await run('append', ...appendArgs([{ id }]));
    expect(reply).toEqual([['1000', expect.stringMatching(/^\d+$/)]]);
    const ev = await client.hgetall(key(`e:${id}`));
    expect(ev).toMatchObject({ t: 't', pl: '{"n":1}', hd: '{}', oa: '1000', sq: '1', n: '1' });
    const [did] = await client.zrange(key('q:A'), 0, -1);
    expect(await client.hgetall(key(`d:${did}`))).toMatchObject({
      ev: id,
      h: 'A',
      st: 'p',
      at: '0',
      so: '1',
    });
    expect(await client.zrange(key('pend'), 0, -1)).toEqual([did]);
    expect(await counters()).toEqual({ 'p:t': '1' });

    expect(await run('append', ...appendArgs([{ id }]))).toEqual(reply);
    expect(await client.get(key('seq'))).toBe('1');
    const other = appendArgs([{ id }]);
    other[9] = 'other content';
    expect(await run('append', ...other)).toEqual(['DUP', id]);
    expect(await client.get(key('seq'))).toBe('1');
  });

  it('append: an event without handlers waits unexpanded; a keyed one joins its key queue', async () => {
    const id = randomUUID();
    await run('append', ...appendArgs([{ id, handlers: [], key: 'k1' }]));
    const [uid] = await client.zrange(key('u:t'), 0, -1);
    expect(await client.hget(key(`d:${uid}`), 'h')).toBe('*');
    expect(await client.zrange(key('uk:1:t:k1'), 0, -1)).toEqual([uid]);
    await run('append', ...appendArgs([{ id: randomUUID(), key: 'k1' }]));
    expect(await client.zcard(key('kq:1:A:k1'))).toBe(1);
  });

  it('appendStage / appendUnstage: staged bodies are committed by append, or dropped', async () => {
    const stage = randomUUID();
    expect(await run('appendStage', stage, 600_000, 'p1', '{"big":true}', 'h1', '{"x":"y"}')).toBe(
      1,
    );
    expect(await client.hgetall(key(`stage:${stage}`))).toEqual({
      p1: '{"big":true}',
      h1: '{"x":"y"}',
    });
    expect(await client.pttl(key(`stage:${stage}`))).toBeGreaterThan(0);
    const id = randomUUID();
    const args = appendArgs([{ id, pl: '' }]);
    args[0] = stage;
    args[6] = '';
    expect(await run('append', ...args)).toHaveLength(1);
    expect(await client.hmget(key(`e:${id}`), 'pl', 'hd')).toEqual(['{"big":true}', '{"x":"y"}']);
    expect(await client.exists(key(`stage:${stage}`))).toBe(0);

    const missing = randomUUID();
    args[0] = missing;
    expect(await run('append', ...args)).toEqual(['STAGE', missing]);
    await run('appendStage', missing, 600_000, 'p1', '{}');
    expect(await run('appendUnstage', missing)).toBe(1);
    expect(await run('appendUnstage', missing)).toBe(0);
  });

  it('claim: leases deliveries oldest first and replies with the deadline and JSON chunks', async () => {
    const token = randomUUID();
    const { events, ids, reply } = await appendAndClaim(2, token);
    expect(typeof reply[0]).toBe('number');
    expect(deliveries(reply)).toEqual(
      events.map((e, i) => [ids[i], 1, 1, e.id, 1, null, { n: 1 }, {}, '1000', expect.any(Number)]),
    );
    for (const id of ids) {
      expect(await client.hgetall(key(`d:${id}`))).toMatchObject({
        st: 'l',
        o: 'w1',
        tk: token,
        lu: String(reply[0]),
        at: '1',
      });
    }
    expect(await client.zrange(key('l:A'), 0, -1)).toEqual(expect.arrayContaining(ids));
    expect(await client.zcard(key('q:A'))).toBe(0);
    expect(await client.zcard(key('pend'))).toBe(0);
    expect(await counters()).toEqual({ l: '2', 'l:t': '2' });
    expect(deliveries(await run('claim', ...claimArgs(randomUUID())))).toEqual([]);
  });

  it('claim: one delivery of a key at a time; expands unexpanded events; sweeps expired leases', async () => {
    await run('append', ...appendArgs([{ id: randomUUID(), key: 'k' }]));
    await run('append', ...appendArgs([{ id: randomUUID(), key: 'k' }]));
    await run('append', ...appendArgs([{ id: randomUUID(), handlers: [] }]));
    const first = deliveries(await run('claim', ...claimArgs(randomUUID(), 10, 1)));
    expect(first.map((d) => d[5])).toEqual(['k', null]);
    expect(await client.zcard(key('u:t'))).toBe(0);
    const leased = await client.zrange(key('l:A'), 0, -1);
    const until = Math.max(
      ...(await Promise.all(leased.map((id) => client.zscore(key('l:A'), id)))).map(Number),
    );
    await clockPast(until);
    const again = deliveries(await run('claim', ...claimArgs(randomUUID())));
    expect(again.map((d) => [d[0], d[2]]).sort()).toEqual(first.map((d) => [d[0], 2]).sort());
  });

  it('renew: extends an owned lease; a lost one answers 0', async () => {
    const token = randomUUID();
    const { ids, reply } = await appendAndClaim(1, token);
    const lu = await run('renew', ids[0], 'w1', token, 120_000);
    expect(lu).toBeGreaterThan(reply[0]);
    expect(await client.hget(key(`d:${ids[0]}`), 'lu')).toBe(String(lu));
    expect(Number(await client.zscore(key('l:A'), ids[0]))).toBe(lu);
    expect(await run('renew', ids[0], 'w1', 'not-the-token', 120_000)).toBe(0);
  });

  it('ack: deletes the delivery, completes the event, activates the next of its key', async () => {
    const token = randomUUID();
    await run('append', ...appendArgs([{ id: randomUUID(), key: 'k' }]));
    const second = randomUUID();
    await run('append', ...appendArgs([{ id: second, key: 'k' }]));
    const [[id, , , ev]] = deliveries(await run('claim', ...claimArgs(token))) as string[][];
    expect(await run('ack', id, 'w1', token)).toBe(1);
    expect(await client.exists(key(`d:${id}`))).toBe(0);
    expect(await client.zrange(key('done'), 0, -1)).toEqual([ev]);
    expect(await client.zcard(key('l:A'))).toBe(0);
    const [next] = await client.zrange(key('q:A'), 0, -1);
    expect(await client.hmget(key(`d:${next}`), 'ev', 'ac')).toEqual([second, '1']);
    expect(await counters()).toEqual({ 'p:t': '1' });
    expect(await run('ack', id, 'w1', token)).toBe(0);
  });

  it('ackMany: acknowledges groups of leases and answers the positions it refused', async () => {
    const token = randomUUID();
    const { ids } = await appendAndClaim(3, token);
    const refused = await run('ackMany', 'w1', token, 2, ids[0], ids[1], 'w2', token, 1, ids[2]);
    expect(refused).toEqual([3]);
    expect(await client.exists(key(`d:${ids[0]}`), key(`d:${ids[1]}`))).toBe(0);
    expect(await client.hget(key(`d:${ids[2]}`), 'st')).toBe('l');
    expect(await client.zcard(key('done'))).toBe(2);
    expect(await counters()).toEqual({ l: '1', 'l:t': '1' });
    expect(await run('ackMany', 'w1', token, 1, ids[2])).toEqual([]);
  });

  it('retry: schedules the delivery again after the delay with the error recorded', async () => {
    const token = randomUUID();
    const { ids } = await appendAndClaim(1, token);
    expect(await run('retry', ids[0], 'w1', token, 60_000, ...errorArgs)).toBe(1);
    const d = await client.hgetall(key(`d:${ids[0]}`));
    expect(d).toMatchObject({ st: 'p', at: '1' });
    expect(d.o).toBeUndefined();
    expect(JSON.parse(d.er)).toEqual([
      {
        j: 1,
        name: '"Error"',
        message: '"boom"',
        attempt: 1,
        workerId: '"w1"',
        at: expect.any(String),
      },
    ]);
    expect(Number(await client.zscore(key('s:A'), ids[0]))).toBe(Number(d.av));
    expect(await client.zrange(key('pend'), 0, -1)).toEqual([ids[0]]);
    expect(await counters()).toEqual({ 'p:t': '1' });
    expect(await run('retry', ids[0], 'w1', token, 0, ...errorArgs)).toBe(0);
  });

  it('release: gives the delivery back runnable now, its attempt not counted', async () => {
    const token = randomUUID();
    const { ids } = await appendAndClaim(1, token);
    expect(await run('release', ids[0], 'w1', token)).toBe(1);
    expect(await client.hmget(key(`d:${ids[0]}`), 'st', 'at', 'o')).toEqual(['p', '0', null]);
    expect(await client.zrange(key('q:A'), 0, -1)).toEqual([ids[0]]);
    expect(await counters()).toEqual({ 'p:t': '1' });
    expect(await run('release', ids[0], 'w1', token)).toBe(0);
  });

  /** One dead letter, made through claim and deadLetter. */
  const deadOne = async () => {
    const token = randomUUID();
    const { events, ids } = await appendAndClaim(1, token);
    expect(await run('deadLetter', ids[0], 'w1', token, 'exhausted', ...errorArgs)).toBe(1);
    return { id: ids[0], ev: events[0].id };
  };

  it('deadLetter: moves the delivery to the dead letters with reason and error', async () => {
    const { id } = await deadOne();
    const d = await client.hgetall(key(`d:${id}`));
    expect(d).toMatchObject({ st: 'x', rs: 'exhausted' });
    expect(JSON.parse(d.er)).toHaveLength(1);
    expect(Number(await client.zscore(key('dead'), id))).toBe(Number(d.da));
    expect(await client.zcard(key('l:A'))).toBe(0);
    expect(await counters()).toEqual({ 'x:t': '1' });
  });

  it('deadGet: one dead letter as a row of 12 values, or [null]', async () => {
    const { id, ev } = await deadOne();
    const [row] = await run('deadGet', id);
    expect(row).toEqual([
      id,
      ev,
      'A',
      't',
      null,
      '1',
      'exhausted',
      expect.any(String),
      expect.any(String),
      '{"n":1}',
      '{}',
      '1000',
    ]);
    expect(await run('deadGet', randomUUID())).toEqual([null]);
  });

  it('deadList: a filtered page with its cursor; without bodies when not full', async () => {
    const a = await deadOne();
    const b = await deadOne();
    const [rows, lastS, lastId, exhausted] = await run('deadList', '1', ...filterAll, 10, 5000);
    expect(rows.map((r: unknown[]) => r[0])).toEqual(expect.arrayContaining([a.id, b.id]));
    expect(rows[0]).toHaveLength(12);
    expect([typeof lastS, lastId, exhausted]).toEqual(['string', rows[1][0], 1]);
    const [page] = await run('deadList', '0', ...filterAll, 1, 5000);
    expect(page).toHaveLength(1);
    expect(page[0].slice(9)).toEqual([null, null, null]);
    const none = ['-inf', '+inf', '', '', '+other', '-', '-'];
    expect((await run('deadList', '1', ...none, 10, 5000))[0]).toEqual([]);
  });

  it('replay: by ids and by filter, dead letters become pending with attempts reset', async () => {
    const a = await deadOne();
    expect(await run('replay', 'ids', '', a.id, randomUUID())).toEqual([1, '', '', 1]);
    expect(await client.hmget(key(`d:${a.id}`), 'st', 'at', 'rs')).toEqual(['p', '0', null]);
    expect(await client.zrange(key('q:A'), 0, -1)).toEqual([a.id]);
    const token = randomUUID();
    await run('claim', ...claimArgs(token));
    await run('deadLetter', a.id, 'w1', token, 'exhausted', ...errorArgs);
    const later = Date.now() + 3_600_000;
    const [count, , , exhausted] = await run('replay', 'filter', later, ...filterAll, 500, 5000);
    expect([count, exhausted]).toEqual([1, 1]);
    expect(Number(await client.zscore(key('s:A'), a.id))).toBe(later);
    expect(await client.zcard(key('dead'))).toBe(0);
    expect(await counters()).toEqual({ 'p:t': '1' });
  });

  it('purge: by ids and by filter, drops dead letters and their finished events', async () => {
    const a = await deadOne();
    const b = await deadOne();
    expect(await run('purge', 'ids', a.id)).toEqual([1, '', '', 1]);
    expect(await client.exists(key(`d:${a.id}`), key(`e:${a.ev}`))).toBe(0);
    const [count, , , exhausted] = await run('purge', 'filter', ...filterAll, 500, 5000);
    expect([count, exhausted]).toEqual([1, 1]);
    expect(await client.exists(key(`d:${b.id}`), key(`e:${b.ev}`))).toBe(0);
    expect(await client.zcard(key('dead'))).toBe(0);
    expect(await counters()).toEqual({});
  });

  it('cleanup: deletes completed events and old dead letters past their retention', async () => {
    const token = randomUUID();
    const { ids, events } = await appendAndClaim(1, token);
    await run('ack', ids[0], 'w1', token);
    const dead = await deadOne();
    expect(await run('cleanup', 3_600_000, '', 100)).toEqual([0, 0]);
    await clockPast(Number(await run('now')));
    expect(await run('cleanup', 0, '', 100)).toEqual([1, 0]);
    expect(await client.exists(key(`e:${events[0].id}`))).toBe(0);
    expect(await client.zcard(key('done'))).toBe(0);
    expect(await run('cleanup', 0, 0, 100)).toEqual([0, 1]);
    expect(await client.exists(key(`d:${dead.id}`), key(`e:${dead.ev}`))).toBe(0);
  });

  it('stats: now, pending, due, oldest, leased, dead and the counters', async () => {
    const later = Date.now() + 3_600_000;
    await run('append', ...appendArgs([{ id: randomUUID() }, { id: randomUUID(), av: later }]));
    await run('append', ...appendArgs([{ id: randomUUID(), handlers: ['B'] }]));
    await run('claim', ...claimArgs(randomUUID(), 1));
    const [now, pending, due, oldest, leased, dead, cnt] = await run('stats');
    expect(typeof now).toBe('number');
    expect([pending, due, leased, dead]).toEqual([2, 1, '1', 0]);
    expect(Number(oldest)).toBeLessThanOrEqual(now);
    const fields = Object.fromEntries(
      (cnt as string[]).flatMap((v, i, all) => (i % 2 ? [] : [[v, all[i + 1]]])),
    );
    expect(fields).toEqual({ l: '1', 'l:t': '1', 'p:t': '2' });
  });
});
