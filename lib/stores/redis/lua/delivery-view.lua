-- Fragment of deliveries-list.lua, event-view.lua and events-by-key.lua. Defines:
--   record(id)        one delivery as { id, ev, h, t, k, st, at, av, o, lu, er, da }, or false
--                     when there is none (delivered deliveries are deleted)
--   eventRow(ev)      an event as { id, t, k, pl, hd, oa, av, sq }, or false when it is gone
--   eventRecords(ev, handlers)  the deliveries of `ev` among `handlers` and '*' (delivery ids
--                     are derived from event and handler, see `uuid`)

local function record(id)
  local f = redis.call('HMGET', dkey(id), 'ev', 'h', 't', 'k', 'st', 'at', 'av', 'o', 'lu', 'er', 'da')
  if not f[1] then return false end
  return { id, f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10], f[11] }
end

local function eventRow(ev)
  local f = redis.call('HMGET', ekey(ev), 't', 'k', 'pl', 'hd', 'oa', 'av', 'sq')
  if not f[1] then return false end
  return { ev, f[1], f[2], f[3], f[4], f[5], f[6], f[7] }
end

local function eventRecords(ev, handlers)
  local out = {}
  local seen = {}
  for _, h in ipairs(handlers) do
    if not seen[h] then
      seen[h] = true
      local r = record(uuid(ev .. '|' .. h))
      if r and r[2] == ev then table.insert(out, r) end
    end
  end
  return out
end
