-- Fragment of ack.lua and ack-many.lua. Defines:
--   ackOne(id, owner, token)  acknowledges one delivery if the lease is owned and live: 1,
--                             else 0 (unchanged)
--   ackFlush()                writes once what every acknowledged delivery of the script shares:
--                             the leased sets, the deleted hashes, the completed events, counters

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
