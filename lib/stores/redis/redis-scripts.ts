import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/*
 * Lua scripts of the Redis outbox store. Internal: not exported from the public barrel.
 *
 * The Lua lives in `lua/` beside this file (shipped in the package as `dist/stores/redis/lua/`):
 * `prelude.lua` (what every script shares), one file per script, and the fragments two scripts
 * share (`ack-one.lua`, `dead-view.lua`). They are read and composed once, when this module loads;
 * the client hashes each composed source once and runs it by EVALSHA (`redis-client.ts`).
 *
 * Every state change runs as one script, so it is atomic in Redis and reads the clock with `TIME`
 * (docs/guarantees.md, Guarantees 5). ARGV[1] is the key base `<keyPrefix>{prefix}:`; KEYS[1] is `{prefix}:seq`, declared
 * so a Cluster client routes the script to the slot every key of this outbox shares.
 *
 * Layout under the base B:
 *   seq              append counter (global append order)
 *   e:<eventId>      hash  t type, k key?, pl payload, hd headers, oa occurredAt, av availableAt,
 *                          sq seq, c content hash, n deliveries not yet delivered
 *   d:<deliveryId>   hash  ev, h handler, t type, k key?, sq, st p|l|x, at attempts, av, o owner,
 *                          tk token, lu leaseUntil, er errors JSON, rs reason, da deadAt, ac active,
 *                          so '1' when it is its event's only delivery ever (appended with one
 *                          handler): its ack completes the event without decrementing the event's
 *                          n, which a completed event no longer needs (a dead one still counts n
 *                          down when purged). Absent on deliveries written before it and on
 *                          expanded ones: their ack counts n as before.
 *   q:<handler>      zset  runnable now, by seq (only the active delivery of a key is here)
 *   s:<handler>      zset  runnable later, by availableAt
 *   l:<handler>      zset  leased, by leaseUntil
 *   kq:<len>:<handler>:<key>  zset  open deliveries of one (handler, key), by seq
 *   u:<type>         zset  unexpanded deliveries (handler '*'), by seq
 *   uk:<len>:<type>:<key>  zset  unexpanded deliveries of one (type, key), by seq; a claim checks
 *                          it so a keyed delivery never overtakes an older event of its key that
 *                          is still unexpanded (docs/guarantees.md, Guarantees 6)
 *   pend             zset  every pending delivery, by availableAt (stats: due, oldest)
 *   dead             zset  dead letters, by deadAt; ties by id, which is the cursor order
 *   done             zset  fully delivered events, by completion time (retention)
 *   ek:<key>         zset  ids of the events of one ordering key, by seq (the admin API's events
 *                          by key); written by append, cleared when the event is deleted. Events
 *                          appended before it existed are not in it
 *   cnt              hash  leased count and per-type p:/l:/x: counters (zero fields removed)
 *   stage:<batchId>  hash  p<n> payload, h<n> headers of the n-th event of an append too large for
 *                          one call, staged in bounded calls; the append script takes them and
 *                          deletes the hash (a TTL removes one an interrupted append left)
 *
 * The layout has no version key. The batched scripts (issue 9) kept it as it was: the same keys
 * and fields with the same meanings, so stores of the versions before and after may run against
 * the same keys (a rolling deploy; each client runs its own scripts by SHA). Since then only
 * additions that both versions read correctly: `so` (absent: the ack counts n, as before; older
 * scripts ignore it and count n, which stays right), a token shared by the leases of one claim
 * (a value of `tk`, compared as before), `ek:<key>` (older scripts neither write nor clear it: an
 * entry they leave behind is dropped when read) and `stack` in error entries (older code ignores
 * it). A change that older scripts would misread must add a
 * version key and an upgrade path.
 *
 * Cost per delivery (bench/RESULTS.md, "Redis store scripts"): a script reads and writes only what
 * one delivery needs and writes what a batch shares once at its end: counters are summed in the
 * script (`incr`, written by `flush`), sorted-set and DEL updates go out as one variadic command
 * per key (`bulk`), and hot paths pass strings to redis.call (a Lua number is formatted with
 * printf on every call).
 *
 * Error entries in `er` are `{ j: 1, name, message, workerId, attempt, at, stack? }` where name, message,
 * workerId and stack hold the JSON text of the string (made by JavaScript), so any string — lone UTF-16
 * surrogates included, which UTF-8 cannot carry — comes back exactly. Entries without `j` (written
 * before) hold the plain strings.
 */

/**
 * The files of each script after the prelude, in order: a fragment it uses (which defines
 * functions), then its own file, whose header says its keys, arguments and reply.
 */
export const REDIS_SCRIPT_FILES = {
  append: ['append'],
  appendStage: ['append-stage'],
  appendUnstage: ['append-unstage'],
  claim: ['claim'],
  renew: ['renew'],
  ack: ['ack-one', 'ack'],
  ackMany: ['ack-one', 'ack-many'],
  retry: ['retry'],
  deadLetter: ['dead-letter'],
  release: ['release'],
  replay: ['replay'],
  purge: ['purge'],
  cleanup: ['cleanup'],
  stats: ['stats'],
  now: ['now'],
  deadGet: ['dead-view', 'dead-get'],
  deadList: ['dead-view', 'dead-list'],
  deliveriesList: ['delivery-view', 'deliveries-list'],
  eventView: ['delivery-view', 'event-view'],
  eventsByKey: ['delivery-view', 'events-by-key'],
  catalog: ['catalog'],
  backlog: ['backlog'],
} as const satisfies Record<string, readonly string[]>;

export type RedisScriptName = keyof typeof REDIS_SCRIPT_FILES;

/** The Lua files beside this module (lib/ in tests, dist/ in the package). */
export const LUA_DIR = join(__dirname, 'lua');

const lua = (file: string) => readFileSync(join(LUA_DIR, `${file}.lua`), 'utf8');

const PRELUDE = lua('prelude');

/**
 * A script body after the shared prelude, run as a function so that every return path ends with
 * one write of the counters it changed (see `flush` in the prelude).
 */
const body = (files: readonly string[]) =>
  PRELUDE +
  '\nlocal result = (function()\n' +
  files.map(lua).join('\n') +
  '\nend)()\nflush()\nreturn result\n';

/** Script sources by name, read and composed once; each gets the shared prelude. */
export const REDIS_SCRIPTS = Object.fromEntries(
  Object.entries(REDIS_SCRIPT_FILES).map(([name, files]) => [name, body(files)]),
) as Record<RedisScriptName, string>;
