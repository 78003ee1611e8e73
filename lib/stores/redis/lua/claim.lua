-- claim: leases up to limit runnable deliveries of this worker's handlers, oldest first, one
-- active delivery per (handler, key). First expands unexpanded deliveries of the named types,
-- moves due deliveries and expired leases back to runnable (at most cap of each per type or
-- handler).
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  worker id (the lease owner)
-- ARGV[3]  lease duration in ms
-- ARGV[4]  limit, most deliveries to lease
-- ARGV[5]  the lease token, one for every lease of this claim
-- ARGV[6]  cap, most entries one sweep moves (claimSweepLimit)
-- ARGV[7]  nh, then nh handler names
-- then     nt, then per type: type, handler count c, then c handler names
-- Returns  { leaseUntil, chunk... }: the lease deadline (ms), then JSON texts, each a flat array
--           of 10 values per delivery: id, handler position, attempt, event id, type position
--           (or its text when not named), key or null, payload, headers, occurredAt text,
--           availableAt (see the reply comment below)

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
