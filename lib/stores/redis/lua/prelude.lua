-- Prelude of every script: the key base, the clock (Redis TIME), key names, and the helpers the
-- scripts share. Each script is this file, then its own file(s) run as one function, then one
-- write of the counters it changed (see `body` in ../redis-scripts.ts, which also describes the
-- key layout).
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)

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
-- stack: JSON text of the stack, or '' (or nil) for none.
local function pushError(raw, name, message, attempt, worker, max, stack)
  local errs = {}
  if raw then errs = cjson.decode(raw) end
  local entry = { j = 1, name = name, message = message, attempt = tonumber(attempt), workerId = worker, at = tostring(now) }
  if stack and stack ~= '' then entry.stack = stack end
  table.insert(errs, entry)
  while #errs > max do table.remove(errs, 1) end
  return cjson.encode(errs)
end

-- An event about to be deleted leaves the index of its key (`ek:<key>`, events-by-key.lua).
local function unindexEvent(ev)
  local k = redis.call('HGET', ekey(ev), 'k')
  if k then redis.call('ZREM', B .. 'ek:' .. k, ev) end
end

local function dropDead(id)
  local f = redis.call('HMGET', dkey(id), 'st', 't', 'ev')
  if f[1] ~= 'x' then return 0 end
  redis.call('DEL', dkey(id))
  redis.call('ZREM', DEAD, id)
  incr('x:' .. f[2], -1)
  if redis.call('HINCRBY', ekey(f[3]), 'n', -1) <= 0 then
    unindexEvent(f[3])
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
