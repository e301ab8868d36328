-- fixed_window return: lower the current window's count by n, never below
-- 0. Mirrors lease.FixedWindowState.Return: tokens granted in an earlier
-- window are not returned to this one.
--
-- KEYS[1]  hash {w = start of the counted window, unix µs; c = count}
-- ARGV     limit, period_us, tokens
-- returns  1, or 0 when there was nothing to do
local key = KEYS[1]
local pu, n = tonumber(ARGV[2]), tonumber(ARGV[3])
local st = redis.call('HMGET', key, 'w', 'c')
if not st[1] or n <= 0 then
  return 0
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local count = tonumber(st[2])
if tonumber(st[1]) < now - math.fmod(now, pu) or count == 0 then
  return 0
end
redis.call('HSET', key, 'c', string.format('%.17g', math.max(0, count - n)))
return 1
