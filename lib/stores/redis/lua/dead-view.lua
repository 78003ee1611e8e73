-- Fragment of dead-get.lua and dead-list.lua. Defines:
--   view(id, full)  one dead letter as { id, ev, h, t, k, at, rs, er, da, pl, hd, oa } (pl, hd,
--                   oa false unless full), or false when it is not dead

local function view(id, full)
  local f = redis.call('HMGET', dkey(id), 'st', 'ev', 'h', 't', 'k', 'at', 'rs', 'er', 'da')
  if f[1] ~= 'x' then return false end
  local e = { false, false, false }
  if full then e = redis.call('HMGET', ekey(f[2]), 'pl', 'hd', 'oa') end
  return { id, f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], e[1], e[2], e[3] }
end
