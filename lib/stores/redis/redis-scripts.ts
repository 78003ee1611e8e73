/*
 * Lua scripts of the Redis outbox store. Internal: not exported from the public barrel.
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
 *   cnt              hash  leased count and per-type p:/l:/x: counters (zero fields removed)
 *   stage:<batchId>  hash  p<n> payload, h<n> headers of the n-th event of an append too large for
 *                          one call, staged in bounded calls; the append script takes them and
 *                          deletes the hash (a TTL removes one an interrupted append left)
 *
 * The layout has no version key. The batched scripts (issue 9) kept it as it was: the same keys
 * and fields with the same meanings, so stores of the versions before and after may run against
 * the same keys (a rolling deploy; each client runs its own scripts by SHA). Since then only
 * additions that both versions read correctly: `so` (absent: the ack counts n, as before; older
 * scripts ignore it and count n, which stays right) and a token shared by the leases of one claim
 * (a value of `tk`, compared as before). A change that older scripts would misread must add a
 * version key and an upgrade path.
 *
 * Cost per delivery (bench/RESULTS.md, "Redis store scripts"): a script reads and writes only what
 * one delivery needs and writes what a batch shares once at its end: counters are summed in the
 * script (`incr`, written by `flush`), sorted-set and DEL updates go out as one variadic command
 * per key (`bulk`), and hot paths pass strings to redis.call (a Lua number is formatted with
 * printf on every call).
 *
 * Error entries in `er` are `{ j: 1, name, message, workerId, attempt, at }` where name, message
 * and workerId hold the JSON text of the string (made by JavaScript), so any string — lone UTF-16
 * surrogates included, which UTF-8 cannot carry — comes back exactly. Entries without `j` (written
 * before) hold the plain strings.
 */

const PRELUDE = `
local B = ARGV[1]
local T = redis.call('TIME')
local now = tonumber(T[1]) * 1000 + math.floor(tonumber(T[2]) / 1000)
-- A Lua number passed to redis.call is formatted with printf on every call (about as costly as
-- the command itself): hot paths pass strings, made once per script.
local nowS = tostring(now)
local CNT = B .. 'cnt'
local PEND = B .. 'pend'
local DEAD = B .. 'dead'
local DONE = B .. 'done'

local function dkey(id) return B .. 'd:' .. id end
local function ekey(id) return B .. 'e:' .. id end
local function hkey(kind, h) return B .. kind .. ':' .. h end
local function kqkey(h, k) return B .. 'kq:' .. string.len(h) .. ':' .. h .. ':' .. k end
local function ukkey(t, k) return B .. 'uk:' .. string.len(t) .. ':' .. t .. ':' .. k end
local function opt(v) if v == false or v == nil or v == '' then return nil end return v end

-- Counter changes are summed in the script and written once per field at its end (flush), so a
-- batch of n deliveries costs one HINCRBY per field touched, not n.
local counts = {}
local function incr(field, by)
  counts[field] = (counts[field] or 0) + by
end
local function flush()
  for field, by in pairs(counts) do
    if by ~= 0 and redis.call('HINCRBY', CNT, field, by) == 0 then redis.call('HDEL', CNT, field) end
  end
  counts = {}
end

-- One variadic command per list (in chunks, well under Lua's unpack limit) instead of one per item.
-- key nil: the list holds the keys themselves (DEL).
local function bulk(cmd, key, list)
  for j = 1, #list, 1000 do
    if key then
      redis.call(cmd, key, unpack(list, j, math.min(j + 999, #list)))
    else
      redis.call(cmd, unpack(list, j, math.min(j + 999, #list)))
    end
  end
end

-- Deterministic per (event, handler), so an expansion retried after a lost reply cannot fork a delivery.
local function uuid(seed)
  local h = redis.sha1hex(seed)
  local variant = string.format('%x', 8 + (tonumber(string.sub(h, 17, 17), 16) % 4))
  return string.sub(h, 1, 8) .. '-' .. string.sub(h, 9, 12) .. '-5' .. string.sub(h, 14, 16) .. '-' ..
    variant .. string.sub(h, 18, 20) .. '-' .. string.sub(h, 21, 32)
end

local function schedule(id, h, sq, av)
  if av <= now then
    redis.call('ZADD', hkey('q', h), sq, id)
  else
    redis.call('ZADD', hkey('s', h), av, id)
  end
end

local function unschedule(id, h)
  redis.call('ZREM', hkey('q', h), id)
  redis.call('ZREM', hkey('s', h), id)
end

local function activate(id)
  local f = redis.call('HMGET', dkey(id), 'h', 'sq', 'av', 'st')
  redis.call('HSET', dkey(id), 'ac', '1')
  if f[4] == 'p' then schedule(id, f[1], tonumber(f[2]), tonumber(f[3])) end
end

-- Only the oldest open delivery of a (handler, key) is active, i.e. visible to claims (docs/guarantees.md, Guarantees 6).
-- An older one arriving late (expansion, replay) takes over unless the current one is running.
local function enqueue(id, h, k, sq, av)
  if not k then
    schedule(id, h, sq, av)
    return
  end
  local kq = kqkey(h, k)
  local head = redis.call('ZRANGE', kq, 0, 0)[1]
  redis.call('ZADD', kq, sq, id)
  if not head then
    redis.call('HSET', dkey(id), 'ac', '1')
    schedule(id, h, sq, av)
  elseif sq < tonumber(redis.call('ZSCORE', kq, head)) then
    local hs = redis.call('HMGET', dkey(head), 'st', 'ac')
    if hs[1] == 'p' and hs[2] == '1' then
      unschedule(head, h)
      redis.call('HSET', dkey(head), 'ac', '0')
      redis.call('HSET', dkey(id), 'ac', '1')
      schedule(id, h, sq, av)
    end
  end
end

-- A pending active delivery (after retry, release or lease expiry) runs again, unless an older
-- delivery of its key now waits in front of it.
local function requeue(id, h, k, sq, av)
  if k then
    local head = redis.call('ZRANGE', kqkey(h, k), 0, 0)[1]
    if head and head ~= id then
      redis.call('HSET', dkey(id), 'ac', '0')
      if redis.call('HGET', dkey(head), 'ac') ~= '1' then activate(head) end
      return
    end
  end
  schedule(id, h, sq, av)
end

-- A delivery leaves its key for good (delivered or dead): the next one becomes active.
local function leaveKey(id, h, k)
  if not k then return end
  local kq = kqkey(h, k)
  redis.call('ZREM', kq, id)
  redis.call('HSET', dkey(id), 'ac', '0')
  local head = redis.call('ZRANGE', kq, 0, 0)[1]
  if head and redis.call('HGET', dkey(head), 'ac') ~= '1' then activate(head) end
end

-- sole: the event's only delivery, ever (see 'so' in the layout).
local function newDelivery(id, ev, h, t, k, sq, av, sole)
  local dk = dkey(id)
  if sole then
    redis.call('HSET', dk, 'ev', ev, 'h', h, 't', t, 'sq', sq, 'st', 'p', 'at', 0, 'av', av, 'so', '1')
  else
    redis.call('HSET', dk, 'ev', ev, 'h', h, 't', t, 'sq', sq, 'st', 'p', 'at', 0, 'av', av)
  end
  if k then redis.call('HSET', dk, 'k', k) end
  redis.call('ZADD', PEND, av, id)
  incr('p:' .. t, 1)
  if h == '*' then
    redis.call('ZADD', B .. 'u:' .. t, sq, id)
    if k then redis.call('ZADD', ukkey(t, k), sq, id) end
  else
    enqueue(id, h, k, sq, av)
  end
end

local function isOwned(f, owner, token)
  return f[1] == 'l' and f[2] == owner and f[3] == token and tonumber(f[4]) > now
end

-- f = st, o, tk, lu, h, t, k, sq, ev, at, er
local function owned(id, owner, token)
  local f = redis.call('HMGET', dkey(id), 'st', 'o', 'tk', 'lu', 'h', 't', 'k', 'sq', 'ev', 'at', 'er')
  if not isOwned(f, owner, token) then return nil end
  return f
end

-- Drops a lease: from the leased set, the hash's lease fields and the counters.
local function unlease(id, f)
  redis.call('ZREM', hkey('l', f[5]), id)
  redis.call('HDEL', dkey(id), 'o', 'tk', 'lu')
  incr('l', -1)
  incr('l:' .. f[6], -1)
end

-- The error history with one more entry, as JSON for the 'er' field.
local function pushError(raw, name, message, attempt, worker, max)
  local errs = {}
  if raw then errs = cjson.decode(raw) end
  table.insert(errs, { j = 1, name = name, message = message, attempt = tonumber(attempt), workerId = worker, at = tostring(now) })
  while #errs > max do table.remove(errs, 1) end
  return cjson.encode(errs)
end

local function dropDead(id)
  local f = redis.call('HMGET', dkey(id), 'st', 't', 'ev')
  if f[1] ~= 'x' then return 0 end
  redis.call('DEL', dkey(id))
  redis.call('ZREM', DEAD, id)
  incr('x:' .. f[2], -1)
  if redis.call('HINCRBY', ekey(f[3]), 'n', -1) <= 0 then
    redis.call('DEL', ekey(f[3]))
    redis.call('ZREM', DONE, f[3])
  end
  return 1
end

-- Walks dead letters in (deadAt, id) order from a cursor, collecting up to limit ids that match
-- the filter; stops after scanning cap entries so one call stays bounded.
-- a: index of the filter arguments: start, max, cursorScore, cursorId, type, handler, key.
local function scanDead(a, limit, cap)
  local start, max = ARGV[a], ARGV[a + 1]
  local cs, cid = tonumber(opt(ARGV[a + 2])), ARGV[a + 3]
  local ft, fh, fk = ARGV[a + 4], ARGV[a + 5], ARGV[a + 6]
  local ids = {}
  local scanned, offset = 0, 0
  local lastS, lastId = '', ''
  while true do
    local chunk = redis.call('ZRANGEBYSCORE', DEAD, start, max, 'WITHSCORES', 'LIMIT', offset, 200)
    local full = #chunk == 400
    for j = 1, #chunk, 2 do
      local id, s = chunk[j], tonumber(chunk[j + 1])
      if not (cs and s == cs and id <= cid) then
        scanned = scanned + 1
        lastS, lastId = chunk[j + 1], id
        local f = redis.call('HMGET', dkey(id), 't', 'h', 'k')
        if (ft == '-' or '+' .. f[1] == ft) and (fh == '-' or '+' .. f[2] == fh) and
            (fk == '-' or (f[3] and '+' .. f[3] == fk)) then
          table.insert(ids, id)
        end
        if #ids >= limit or scanned >= cap then
          return ids, lastS, lastId, (j + 1 == #chunk) and not full
        end
      end
    end
    if not full then return ids, lastS, lastId, true end
    offset = offset + 200
  end
end
`;

/**
 * ARGV: B, stage batch id or '', n, then per event id, type, key, payload, headers, occurredAt,
 * availableAt, content hash, handler count, handlers. With a stage id, payload and headers are ''
 * and come from the stage hash, so a large batch still commits in this one atomic script.
 */
const APPEND = `
local SK = nil
if ARGV[2] ~= '' then SK = B .. 'stage:' .. ARGV[2] end
local n = tonumber(ARGV[3])
local evs = {}
local i = 4
for e = 1, n do
  local ev = { id = ARGV[i], t = ARGV[i + 1], k = ARGV[i + 2], pl = ARGV[i + 3], hd = ARGV[i + 4],
    oa = ARGV[i + 5], av = ARGV[i + 6], c = ARGV[i + 7], h = {} }
  local nh = tonumber(ARGV[i + 8])
  for j = 1, nh do ev.h[j] = ARGV[i + 8 + j] end
  i = i + 9 + nh
  evs[e] = ev
end
-- Every staged part must be there (a stage hash outlived by its TTL is not committed half).
if SK and redis.call('HLEN', SK) ~= 2 * n then
  redis.call('DEL', SK)
  return { 'STAGE', ARGV[2] }
end
-- Check the whole batch first so a conflicting id anywhere writes nothing (docs/guarantees.md, Guarantees 10).
local seen = {}
for _, ev in ipairs(evs) do
  local c = redis.call('HGET', ekey(ev.id), 'c') or seen[ev.id]
  if c and c ~= ev.c then
    if SK then redis.call('DEL', SK) end
    return { 'DUP', ev.id }
  end
  seen[ev.id] = ev.c
end
local out = {}
for e, ev in ipairs(evs) do
  local ek = ekey(ev.id)
  if redis.call('EXISTS', ek) == 0 then
    if SK then
      ev.pl = redis.call('HGET', SK, 'p' .. e)
      ev.hd = redis.call('HGET', SK, 'h' .. e)
    end
    local sq = redis.call('INCR', KEYS[1])
    local av = now
    if ev.av ~= '' then av = tonumber(ev.av) end
    local k = nil
    if string.sub(ev.k, 1, 1) == '+' then k = string.sub(ev.k, 2) end
    local hs, uniq = {}, {}
    for _, h in ipairs(ev.h) do
      if not uniq[h] then uniq[h] = true; table.insert(hs, h) end
    end
    if #hs == 0 then hs = { '*' } end
    redis.call('HSET', ek, 't', ev.t, 'pl', ev.pl, 'hd', ev.hd, 'oa', ev.oa, 'av', av, 'sq', sq, 'c', ev.c, 'n', #hs)
    if k then redis.call('HSET', ek, 'k', k) end
    local sole = #hs == 1 and hs[1] ~= '*'
    for _, h in ipairs(hs) do newDelivery(uuid(ev.id .. '|' .. h), ev.id, h, ev.t, k, sq, av, sole) end
  end
  local s = redis.call('HMGET', ek, 'oa', 'av')
  table.insert(out, { s[1], s[2] })
end
if SK then redis.call('DEL', SK) end
return out
`;

/** ARGV: B, batch id, ttl ms, then field, value pairs into the stage hash of an append. */
const APPEND_STAGE = `
local sk = B .. 'stage:' .. ARGV[2]
for j = 4, #ARGV, 2 do redis.call('HSET', sk, ARGV[j], ARGV[j + 1]) end
redis.call('PEXPIRE', sk, tonumber(ARGV[3]))
return 1
`;

/** ARGV: B, batch id. Drops the stage hash of an append that failed before its commit. */
const APPEND_UNSTAGE = `
return redis.call('DEL', B .. 'stage:' .. ARGV[2])
`;

const CLAIM = `
local worker, leaseMs, limit = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local tokenBase, cap = ARGV[5], tonumber(ARGV[6])
local nh = tonumber(ARGV[7])
local hs = {}
for j = 1, nh do hs[j] = ARGV[7 + j] end
local i = 8 + nh
local nt = tonumber(ARGV[i])
i = i + 1
-- types: the types this worker handles; th[type]: its handlers here; htypes[handler]: its types;
-- tpos[type]: its position in the arguments, as reply text (the reply names a known type by it).
local types, th, htypes, tpos = {}, {}, {}, {}
for _ = 1, nt do
  local t, c = ARGV[i], tonumber(ARGV[i + 1])
  th[t] = {}
  for j = 1, c do
    local h = ARGV[i + 1 + j]
    th[t][j] = h
    htypes[h] = htypes[h] or {}
    table.insert(htypes[h], t)
  end
  i = i + 2 + c
  table.insert(types, t)
  tpos[t] = ',' .. #types .. ','
end
-- hpos[j]: the j-th handler's position as reply text, between the id and the attempt.
local hpos = {}
for j = 1, nh do hpos[j] = '",' .. j .. ',' end

-- Turns one unexpanded delivery of type t into one delivery per handler of t on this worker.
local function expand(uid, t)
  local f = redis.call('HMGET', dkey(uid), 'ev', 'k', 'sq', 'av')
  local k = opt(f[2])
  redis.call('DEL', dkey(uid))
  redis.call('ZREM', B .. 'u:' .. t, uid)
  if k then redis.call('ZREM', ukkey(t, k), uid) end
  redis.call('ZREM', PEND, uid)
  incr('p:' .. t, -1)
  local made = 0
  for _, h in ipairs(th[t]) do
    local id = uuid(f[1] .. '|' .. h)
    if redis.call('EXISTS', dkey(id)) == 0 then
      newDelivery(id, f[1], h, t, k, tonumber(f[3]), tonumber(f[4]))
      made = made + 1
    end
  end
  redis.call('HINCRBY', ekey(f[1]), 'n', made - 1)
end

-- Expand the oldest unexpanded deliveries of the types this worker handles.
for _, t in ipairs(types) do
  for _, uid in ipairs(redis.call('ZRANGE', B .. 'u:' .. t, 0, cap - 1)) do expand(uid, t) end
end
-- Deliveries whose time came, and expired leases, become runnable again.
local capS = tostring(cap)
for _, h in ipairs(hs) do
  local sk, qk, lk = hkey('s', h), hkey('q', h), hkey('l', h)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', sk, '-inf', nowS, 'LIMIT', '0', capS)) do
    redis.call('ZREM', sk, id)
    redis.call('ZADD', qk, redis.call('HGET', dkey(id), 'sq'), id)
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', lk, '-inf', nowS, 'LIMIT', '0', capS)) do
    local f = redis.call('HMGET', dkey(id), 't', 'k', 'sq')
    redis.call('ZREM', lk, id)
    redis.call('HDEL', dkey(id), 'o', 'tk', 'lu')
    redis.call('HSET', dkey(id), 'st', 'p', 'av', now)
    redis.call('ZADD', PEND, now, id)
    incr('l', -1)
    incr('l:' .. f[1], -1)
    incr('p:' .. f[1], 1)
    requeue(id, h, opt(f[2]), tonumber(f[3]), now)
  end
end

-- Lowest seq of an unexpanded delivery of key k among the types handler h takes here, or nil.
local function oldestUnexpanded(h, k)
  local m = nil
  for _, t in ipairs(htypes[h] or {}) do
    local r = redis.call('ZRANGE', ukkey(t, k), 0, 0, 'WITHSCORES')
    if r[2] and (not m or tonumber(r[2]) < m) then m = tonumber(r[2]) end
  end
  return m
end

-- Per-key order across expansion (docs/guarantees.md, Guarantees 6): a keyed candidate must not overtake an older event
-- of its key that is still unexpanded. Expand those events (at most cap per claim in all), which
-- puts their deliveries in front of the candidate, and claim the key's head instead; while some
-- older ones stay unexpanded (budget spent), the key waits for a later claim. A candidate that an
-- expansion earlier in this claim moved aside also yields to its key's head.
local budget = cap
-- Keyed deliveries leased by this claim: still members of q until the bulk ZREM at the end, so a
-- key's head found here is checked against this set too (a head is always keyed).
local claimed = {}
local function runnable(qk, id)
  return not claimed[id] and redis.call('ZSCORE', qk, id)
end
-- f: the candidate's k, ev, t, at (read once); sq its seq (number or text). Returns the delivery
-- to lease and its fields.
local function pick(id, h, sq, f)
  local k = opt(f[1])
  if not k then
    -- An unkeyed candidate stays in q during this claim: only keyed deliveries are moved aside
    -- by an expansion, and no candidate appears twice.
    return id, f
  end
  sq = tonumber(sq)
  local qk = hkey('q', h)
  local m = oldestUnexpanded(h, k)
  if m and m < sq then
    for _, t in ipairs(htypes[h]) do
      if budget <= 0 then break end
      local uids = redis.call('ZRANGEBYSCORE', ukkey(t, k), '-inf', '(' .. sq, 'LIMIT', 0, budget)
      for _, uid in ipairs(uids) do expand(uid, t) end
      budget = budget - #uids
    end
    m = oldestUnexpanded(h, k)
  end
  local kq = kqkey(h, k)
  local head = redis.call('ZRANGE', kq, 0, 0, 'WITHSCORES')
  if not head[1] or not runnable(qk, head[1]) then return nil end
  if m and m < tonumber(head[2]) then return nil end
  if head[1] == id then return id, f end
  return head[1], redis.call('HMGET', dkey(head[1]), 'k', 'ev', 't', 'at')
end

-- The reply: the lease deadline, then the leased deliveries as JSON text, 10 values per delivery
-- in one flat array per chunk; the client parses a chunk with one JSON.parse instead of receiving
-- 10 RESP values per delivery and parsing payload and headers one by one. The stored payload and
-- headers are JSON text already (JSON.stringify's, at append) and go in as they are; text that can
-- be anything (event id, key, a type the claim did not name) goes through cjson.encode, which
-- escapes it; what the script makes itself (delivery ids, positions, attempts) needs none.
-- Redis' Lua hashes every byte of every string it makes, so a chunk is built without a string
-- per delivery: the parts (stored strings and constants) go into one table, and table.concat
-- makes the chunk at once while it fits its buffer (LUAL_BUFFERSIZE, 8 KiB with glibc; beyond
-- it, table.concat makes and joins intermediate strings). So a chunk ends before CHUNK bytes; a
-- delivery larger than that has a chunk of its own.
local CHUNK = 8000
local lu = now + leaseMs
local luS = tostring(lu)
local reply, parts, np, bytes = { lu }, {}, 0, 0
local function endChunk()
  parts[np + 1] = ']'
  reply[#reply + 1] = table.concat(parts, '', 1, np + 1)
  np, bytes = 0, 0
end
local count = 0
-- Per handler: the ids leased (removed from q) and score, id pairs (added to l), written in bulk.
local taken, leases, all = {}, {}, {}
-- Leases taken per type, written to the counters once per type at the end.
local byT = {}
-- Leases candidate id (seq sq) of the hi-th handler if pick allows.
local function take(sq, hi, cand)
  local h = hs[hi]
  local dk = dkey(cand)
  local id, f = pick(cand, h, sq, redis.call('HMGET', dk, 'k', 'ev', 't', 'at'))
  if not id then return end
  if id ~= cand then dk = dkey(id) end
  if opt(f[1]) then claimed[id] = true end
  -- The attempt count is read with the candidate and written with the lease (no HINCRBY); a
  -- first attempt, the usual case, without converting numbers.
  -- One token for every lease of this claim, as the SQL stores do: a lease is a delivery's,
  -- and the token is new with each claim, so (delivery, token) still names one lease.
  local atS, atC = '1', '1,'
  if f[4] ~= '0' then
    atS = tostring((tonumber(f[4]) or 0) + 1)
    atC = atS .. ','
  end
  redis.call('HSET', dk, 'st', 'l', 'o', worker, 'tk', tokenBase, 'lu', luS, 'at', atS)
  local tk, ls = taken[h], leases[h]
  if not tk then tk = {}; ls = {}; taken[h] = tk; leases[h] = ls end
  tk[#tk + 1] = id
  ls[#ls + 1] = luS
  ls[#ls + 1] = id
  all[#all + 1] = id
  local t = f[3]
  byT[t] = (byT[t] or 0) + 1
  local e = redis.call('HMGET', ekey(f[2]), 'pl', 'hd', 'oa', 'av')
  -- The token and the lease deadline are the same for every row: the client knows both. Values:
  -- id, handler (its position in the arguments), attempt, event id, type (its position, or its
  -- text when the claim did not name it), key or null, payload, headers, occurredAt as a string
  -- (the text the client sent at append: a number's, so nothing in it needs escaping; whatever
  -- number it holds, NaN included, the reply stays valid JSON), availableAt (written by the append
  -- script from a Lua number: an integer). An event hash that is gone (never, but the reply stays
  -- valid) reads as payload and headers null and times 0.
  local k, ev, tp = f[1], cjson.encode(f[2]), tpos[t]
  if k then k = cjson.encode(k) else k = 'null' end
  if not tp then tp = ',' .. cjson.encode(t) .. ',' end
  local pl, hd, oa, av = e[1] or 'null', e[2] or 'null', e[3] or '0', e[4] or '0'
  local size = 40 + #id + #ev + #tp + #k + #pl + #hd + #oa + #av
  if np > 0 and bytes + size > CHUNK then endChunk() end
  local p, n = parts, np
  if n == 0 then p[1] = '["' else p[n + 1] = ',"' end
  p[n + 2] = id
  p[n + 3] = hpos[hi]
  p[n + 4] = atC
  p[n + 5] = ev
  p[n + 6] = tp
  p[n + 7] = k
  p[n + 8] = ','
  p[n + 9] = pl
  p[n + 10] = ','
  p[n + 11] = hd
  p[n + 12] = ',"'
  p[n + 13] = oa
  p[n + 14] = '",'
  p[n + 15] = av
  np = n + 15
  bytes = bytes + size
  count = count + 1
end

-- Oldest first across this worker's handlers.
local lastS = tostring(limit - 1)
if #hs == 1 then
  -- One handler's candidates come from ZRANGE already in this order.
  local r = redis.call('ZRANGE', hkey('q', hs[1]), '0', lastS, 'WITHSCORES')
  for j = 1, #r, 2 do
    if count >= limit then break end
    take(r[j + 1], 1, r[j])
  end
else
  local cands = {}
  for hi, h in ipairs(hs) do
    local r = redis.call('ZRANGE', hkey('q', h), '0', lastS, 'WITHSCORES')
    for j = 1, #r, 2 do cands[#cands + 1] = { tonumber(r[j + 1]), hi, r[j] } end
  end
  table.sort(cands, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
  for j = 1, #cands do
    if count >= limit then break end
    take(cands[j][1], cands[j][2], cands[j][3])
  end
end
for h, ids in pairs(taken) do
  bulk('ZREM', hkey('q', h), ids)
  bulk('ZADD', hkey('l', h), leases[h])
end
bulk('ZREM', PEND, all)
for t, c in pairs(byT) do
  incr('l:' .. t, c)
  incr('p:' .. t, -c)
end
incr('l', #all)
if np > 0 then endChunk() end
return reply
`;

const RENEW = `
local f = owned(ARGV[2], ARGV[3], ARGV[4])
if not f then return 0 end
local lu = now + tonumber(ARGV[5])
redis.call('HSET', dkey(ARGV[2]), 'lu', lu)
redis.call('ZADD', hkey('l', f[5]), lu, ARGV[2])
return lu
`;

/**
 * Acknowledges one delivery if the lease is owned and live: 1, else 0 (unchanged). What every
 * acknowledged delivery of the script shares is written once at its end (ackFlush): the leased
 * sets, the deleted hashes, the completed events and the counters.
 */
const ACK_ONE = `
local ackedIds, unleased, completed, byT, dks = {}, {}, {}, {}, {}
local ackedN = 0
local function ackOne(id, owner, token)
  if ackedIds[id] then return 0 end
  -- st, o, tk, lu, h, t, k, ev, so
  local dk = dkey(id)
  local f = redis.call('HMGET', dk, 'st', 'o', 'tk', 'lu', 'h', 't', 'k', 'ev', 'so')
  if not isOwned(f, owner, token) then return 0 end
  ackedIds[id] = true
  local h = f[5]
  local ids = unleased[h]
  if not ids then ids = {}; unleased[h] = ids end
  ids[#ids + 1] = id
  dks[#dks + 1] = dk
  -- The leased counters, summed here and written once per type (ackFlush).
  ackedN = ackedN + 1
  byT[f[6]] = (byT[f[6]] or 0) + 1
  local k = opt(f[7])
  if k then
    -- The next delivery of the key becomes active now (its head is read after this one left).
    local kq = kqkey(f[5], k)
    redis.call('ZREM', kq, id)
    local head = redis.call('ZRANGE', kq, 0, 0)[1]
    if head and redis.call('HGET', dkey(head), 'ac') ~= '1' then activate(head) end
  end
  -- Delivered deliveries are deleted; the event stays for the retention window (idempotent append).
  -- An event's only delivery completes it without counting (see 'so' in the layout).
  if f[9] == '1' or redis.call('HINCRBY', ekey(f[8]), 'n', '-1') <= 0 then
    completed[#completed + 1] = nowS
    completed[#completed + 1] = f[8]
  end
  return 1
end
local function ackFlush()
  for h, ids in pairs(unleased) do bulk('ZREM', hkey('l', h), ids) end
  bulk('DEL', nil, dks)
  bulk('ZADD', DONE, completed)
  for t, c in pairs(byT) do incr('l:' .. t, -c) end
  incr('l', -ackedN)
end
`;

const ACK = `
local r = ackOne(ARGV[2], ARGV[3], ARGV[4])
ackFlush()
return r
`;

/**
 * ARGV: B, then per (owner, token) group: owner, token, n, then the ids of its n leases (a claim
 * gives all its leases one token, so a batch of acks is usually one or a few groups). Returns the
 * positions (1-based, in argument order) of the leases not acknowledged: usually none, so the
 * reply stays small.
 */
const ACK_MANY = `
local refused = {}
local j, pos = 2, 0
while j <= #ARGV do
  local owner, token, n = ARGV[j], ARGV[j + 1], tonumber(ARGV[j + 2])
  j = j + 3
  for _ = 1, n do
    pos = pos + 1
    if ackOne(ARGV[j], owner, token) == 0 then table.insert(refused, pos) end
    j = j + 1
  end
end
ackFlush()
return refused
`;

const RETRY = `
local id = ARGV[2]
local f = owned(id, ARGV[3], ARGV[4])
if not f then return 0 end
unlease(id, f)
local er = pushError(f[11], ARGV[6], ARGV[7], ARGV[8], ARGV[9], tonumber(ARGV[10]))
local av = now + tonumber(ARGV[5])
redis.call('HSET', dkey(id), 'st', 'p', 'av', av, 'er', er)
redis.call('ZADD', PEND, av, id)
incr('p:' .. f[6], 1)
requeue(id, f[5], opt(f[7]), tonumber(f[8]), av)
return 1
`;

const DEAD_LETTER = `
local id = ARGV[2]
local f = owned(id, ARGV[3], ARGV[4])
if not f then return 0 end
unlease(id, f)
local er = pushError(f[11], ARGV[6], ARGV[7], ARGV[8], ARGV[9], tonumber(ARGV[10]))
redis.call('HSET', dkey(id), 'st', 'x', 'rs', ARGV[5], 'da', now, 'er', er)
redis.call('ZADD', DEAD, now, id)
incr('x:' .. f[6], 1)
leaveKey(id, f[5], opt(f[7]))
return 1
`;

const RELEASE = `
local id = ARGV[2]
local f = owned(id, ARGV[3], ARGV[4])
if not f then return 0 end
unlease(id, f)
local at = tonumber(f[10]) - 1
if at < 0 then at = 0 end
redis.call('HSET', dkey(id), 'st', 'p', 'av', now, 'at', at)
redis.call('ZADD', PEND, now, id)
incr('p:' .. f[6], 1)
requeue(id, f[5], opt(f[7]), tonumber(f[8]), now)
return 1
`;

/** ARGV: B, mode ids|filter, availableAt|'', then ids... or filter args + batch + cap. */
const REPLAY = `
local av = now
if ARGV[3] ~= '' then av = tonumber(ARGV[3]) end
local function replayOne(id)
  local f = redis.call('HMGET', dkey(id), 'st', 'h', 't', 'k', 'sq')
  if f[1] ~= 'x' then return 0 end
  redis.call('HSET', dkey(id), 'st', 'p', 'at', 0, 'av', av, 'ac', '0')
  redis.call('HDEL', dkey(id), 'rs', 'da')
  redis.call('ZREM', DEAD, id)
  redis.call('ZADD', PEND, av, id)
  incr('x:' .. f[3], -1)
  incr('p:' .. f[3], 1)
  enqueue(id, f[2], opt(f[4]), tonumber(f[5]), av)
  return 1
end
local count = 0
if ARGV[2] == 'ids' then
  for j = 4, #ARGV do count = count + replayOne(ARGV[j]) end
  return { count, '', '', 1 }
end
local ids, lastS, lastId, exhausted = scanDead(4, tonumber(ARGV[11]), tonumber(ARGV[12]))
for _, id in ipairs(ids) do count = count + replayOne(id) end
return { count, lastS, lastId, exhausted and 1 or 0 }
`;

const PURGE = `
local count = 0
if ARGV[2] == 'ids' then
  for j = 3, #ARGV do count = count + dropDead(ARGV[j]) end
  return { count, '', '', 1 }
end
local ids, lastS, lastId, exhausted = scanDead(3, tonumber(ARGV[10]), tonumber(ARGV[11]))
for _, id in ipairs(ids) do count = count + dropDead(id) end
return { count, lastS, lastId, exhausted and 1 or 0 }
`;

/** ARGV: B, deliveredRetentionMs, deadLetterRetentionMs|'', batch. */
const CLEANUP = `
local batch = tonumber(ARGV[4])
local dead = 0
if ARGV[3] ~= '' then
  local cutoff = '(' .. (now - tonumber(ARGV[3]))
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', DEAD, '-inf', cutoff, 'LIMIT', 0, batch)) do
    dead = dead + dropDead(id)
  end
end
local events = 0
local cutoff = '(' .. (now - tonumber(ARGV[2]))
for _, ev in ipairs(redis.call('ZRANGEBYSCORE', DONE, '-inf', cutoff, 'LIMIT', 0, batch)) do
  redis.call('DEL', ekey(ev))
  redis.call('ZREM', DONE, ev)
  events = events + 1
end
return { events, dead }
`;

const STATS = `
local oldest = redis.call('ZRANGE', PEND, 0, 0, 'WITHSCORES')[2] or ''
return { now, redis.call('ZCARD', PEND), redis.call('ZCOUNT', PEND, '-inf', now), oldest,
  redis.call('HGET', CNT, 'l') or '0', redis.call('ZCARD', DEAD), redis.call('HGETALL', CNT) }
`;

/** One dead letter as [id, ev, h, t, k, at, rs, er, da, pl, hd, oa], or false. */
const DEAD_VIEW = `
local function view(id, full)
  local f = redis.call('HMGET', dkey(id), 'st', 'ev', 'h', 't', 'k', 'at', 'rs', 'er', 'da')
  if f[1] ~= 'x' then return false end
  local e = { false, false, false }
  if full then e = redis.call('HMGET', ekey(f[2]), 'pl', 'hd', 'oa') end
  return { id, f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], e[1], e[2], e[3] }
end
`;

const DEAD_GET = `
return { view(ARGV[2], true) }
`;

/** ARGV: B, full 1|0, filter args (7), limit, cap. */
const DEAD_LIST = `
local ids, lastS, lastId, exhausted = scanDead(3, tonumber(ARGV[10]), tonumber(ARGV[11]))
local items = {}
for _, id in ipairs(ids) do table.insert(items, view(id, ARGV[2] == '1')) end
return { items, lastS, lastId, exhausted and 1 or 0 }
`;

/**
 * A script body after the shared prelude, run as a function so that every return path ends with
 * one write of the counters it changed (see `flush` in the prelude).
 */
const body = (...parts: string[]) =>
  PRELUDE + 'local result = (function()\n' + parts.join('') + '\nend)()\nflush()\nreturn result\n';

/** Script sources by name; each gets the shared prelude. */
export const REDIS_SCRIPTS = {
  append: body(APPEND),
  appendStage: body(APPEND_STAGE),
  appendUnstage: body(APPEND_UNSTAGE),
  claim: body(CLAIM),
  renew: body(RENEW),
  ack: body(ACK_ONE, ACK),
  ackMany: body(ACK_ONE, ACK_MANY),
  retry: body(RETRY),
  deadLetter: body(DEAD_LETTER),
  release: body(RELEASE),
  replay: body(REPLAY),
  purge: body(PURGE),
  cleanup: body(CLEANUP),
  stats: body(STATS),
  now: body('return now'),
  deadGet: body(DEAD_VIEW, DEAD_GET),
  deadList: body(DEAD_VIEW, DEAD_LIST),
} as const;

export type RedisScriptName = keyof typeof REDIS_SCRIPTS;
