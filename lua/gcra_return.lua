-- gcra return: TAT = max(now, TAT - floor(n*P/L)). Mirrors
-- lease.GCRAState.Return.
--
-- KEYS[1]  string: TAT in unix µs (an integer)
-- ARGV     limit, period_us, capacity, tokens
-- returns  1, or 0 when the TAT was not after now (a full bucket: nothing
--          to do)
local key = KEYS[1]
local lf, pf = tonumber(ARGV[1]), tonumber(ARGV[2])
local n = tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', key))
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
-- ttl is an expiry argument: a duration in µs as whole milliseconds,
-- rounded up, plus 1ms so that the key outlives its state; capped.
local function ttl(us)
  if not (us > 0) then return '1' end
  return string.format('%d', math.min(math.ceil(us / 1000), 9223372036854) + 1)
end
if not tat or tat <= now or n <= 0 then
  return 0
end
tat = math.max(now, tat - math.min(math.floor(n * pf / lf), tat - now))
if tat <= now then
  redis.call('DEL', key) -- TAT at or before now: the same as no state
  return 1
end
redis.call('SET', key, string.format('%d', tat), 'PX', ttl(tat - now))
return 1
