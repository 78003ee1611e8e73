-- append: appends a batch of events in one atomic step, all or nothing. An id already stored
-- with the same content is kept as it is (idempotent); with other content nothing is written
-- (docs/guarantees.md, Guarantees 10).
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  stage batch id, or '': with one, payloads and headers come from the stage hash
--           (append-stage.lua), so a batch too large for one call still commits here at once
-- ARGV[3]  n, the number of events
-- ARGV[4..] per event: id, type, key ('+key' or '-'), payload JSON (or '' when staged),
--           headers JSON (or ''), occurredAt ms, availableAt ms or '' (now), content hash,
--           handler count h, then h handler names (none: '*', expanded at claim)
-- Returns  per event { occurredAt, availableAt } as stored; { 'DUP', id } when an id is stored
--           with other content; { 'STAGE', batchId } when staged parts are missing (expired)

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
    if k then
      redis.call('HSET', ek, 'k', k)
      redis.call('ZADD', B .. 'ek:' .. k, sq, ev.id)
    end
    local sole = #hs == 1 and hs[1] ~= '*'
    for _, h in ipairs(hs) do newDelivery(uuid(ev.id .. '|' .. h), ev.id, h, ev.t, k, sq, av, sole) end
  end
  local s = redis.call('HMGET', ek, 'oa', 'av')
  table.insert(out, { s[1], s[2] })
end
if SK then redis.call('DEL', SK) end
return out
