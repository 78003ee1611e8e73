-- deliveriesList: a page of open deliveries in one state, keyset-ordered by (time, id).
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  state: 'retrying' (pending, attempted, by availableAt), 'scheduled' (pending, never
--           attempted, due later, by availableAt) or 'leased' (live lease, by leaseUntil)
-- ARGV[3]  type filter: '-' (any) or '+value'
-- ARGV[4]  handler filter: '-' (any) or '+value'
-- ARGV[5]  cursor score or ''
-- ARGV[6]  cursor id or ''
-- ARGV[7]  limit
-- ARGV[8]  cap, most entries examined
-- ARGV[9..] handlers whose leased sets are read (state 'leased')
-- Returns  { { record, ... }, lastScore, lastId, exhausted 1|0 } (records: delivery-view.lua,
--           each followed by its score)

local state, ft, fh = ARGV[2], ARGV[3], ARGV[4]
local cs, cid = tonumber(opt(ARGV[5])), ARGV[6]
local limit, cap = tonumber(ARGV[7]), tonumber(ARGV[8])

local function wanted(r)
  if not r then return false end
  if ft ~= '-' and '+' .. r[4] ~= ft then return false end
  if fh ~= '-' and '+' .. r[3] ~= fh then return false end
  if state == 'leased' then return r[6] == 'l' and tonumber(r[10]) > now end
  if r[6] ~= 'p' then return false end
  if state == 'retrying' then return tonumber(r[7]) > 0 end
  return tonumber(r[7]) == 0 and tonumber(r[8]) > now
end

-- Walks one sorted set from the cursor, collecting wanted records with their scores.
local function scan(key, min, items)
  local scanned, offset = 0, 0
  local lastS, lastId = '', ''
  if cs and (min == '-inf' or cs > tonumber(min)) then min = tostring(cs) end
  while true do
    local chunk = redis.call('ZRANGEBYSCORE', key, min, '+inf', 'WITHSCORES', 'LIMIT', offset, 200)
    local full = #chunk == 400
    for j = 1, #chunk, 2 do
      local id, s = chunk[j], tonumber(chunk[j + 1])
      if not (cs and s == cs and id <= cid) then
        scanned = scanned + 1
        lastS, lastId = chunk[j + 1], id
        local r = record(id)
        if wanted(r) then
          table.insert(items, { r, chunk[j + 1] })
        end
        if #items >= limit or scanned >= cap then
          return lastS, lastId, (j + 1 == #chunk) and not full
        end
      end
    end
    if not full then return lastS, lastId, true end
    offset = offset + 200
  end
end

local items = {}
if state ~= 'leased' then
  local min = '-inf'
  if state == 'scheduled' then min = tostring(now) end
  local lastS, lastId, exhausted = scan(PEND, min, items)
  return { items, lastS, lastId, exhausted and 1 or 0 }
end
-- Leases are kept per handler: each set gives its first `limit` after the cursor, merged here.
local merged = {}
for j = 9, #ARGV do
  local part = {}
  scan(hkey('l', ARGV[j]), tostring(now), part)
  for _, item in ipairs(part) do table.insert(merged, item) end
end
table.sort(merged, function(a, b)
  local sa, sb = tonumber(a[2]), tonumber(b[2])
  if sa ~= sb then return sa < sb end
  return a[1][1] < b[1][1]
end)
local page = {}
for j = 1, math.min(limit, #merged) do page[j] = merged[j] end
return { page, '', '', #merged <= limit and 1 or 0 }
