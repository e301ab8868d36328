-- sliding_window return: lower the current window's count by n, never
-- below 0. Mirrors lease.SlidingWindowState.Return.
--
-- KEYS[1]  hash {w = start of the current window, unix µs; c = cur; p = prev}
-- ARGV     limit, period_us, tokens
-- returns  1, or 0 when there was nothing to do (no state, or the window
--          the tokens were counted in is no longer current)
local key = KEYS[1]
local pf, n = tonumber(ARGV[2]), tonumber(ARGV[3])
local st = redis.call('HMGET', key, 'w', 'c')
if not st[1] or n <= 0 then
  return 0
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local cur = tonumber(st[2])
if tonumber(st[1]) < now - math.fmod(now, pf) or cur == 0 then
  return 0
end
redis.call('HSET', key, 'c', string.format('%.17g', math.max(0, cur - n)))
return 1
