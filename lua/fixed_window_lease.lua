-- fixed_window lease: windows aligned on multiples of the period since the
-- Unix epoch. Mirrors lease.FixedWindowState.Lease: avail = L - count;
-- Wait and Reset are the time to the end of the current window.
--
-- KEYS[1]  hash {w = start of the counted window, unix µs; c = count}
-- ARGV     limit, period_us, want, need
-- returns  {granted, remaining, wait_ms, reset_ms}
--
-- A count of an older window is 0; a stored window later than now's (a
-- clock that went back) stays current. The key is written only when tokens
-- are granted, and expires two windows after its window began.
local key = KEYS[1]
local limit, pu = tonumber(ARGV[1]), tonumber(ARGV[2])
local want, need = tonumber(ARGV[3]), tonumber(ARGV[4])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
-- ttl is an expiry argument: a duration in µs as whole milliseconds,
-- rounded up, plus 1ms so that the key outlives its state; capped.
local function ttl(us)
  if not (us > 0) then return '1' end
  return string.format('%d', math.min(math.ceil(us / 1000), 9223372036854) + 1)
end

-- ms is a duration in µs as whole milliseconds, rounded up, capped like
-- lease's ceilMillis so that extreme policies cannot overflow.
local function ms(us)
  if not (us > 0) then return 0 end
  return math.min(math.ceil(us / 1000), 9223372036854)
end

local ws = now - math.fmod(now, pu) -- fmod is exact on doubles
local count = 0
local st = redis.call('HMGET', key, 'w', 'c')
if st[1] and tonumber(st[1]) >= ws then
  ws, count = tonumber(st[1]), tonumber(st[2])
end
local left = ws + pu - now

local granted, wait = 0, 0
if need > limit then
  wait = pu
elseif math.max(0, limit - count) >= need then
  granted = math.min(want, math.max(0, limit - count))
  if granted > 0 then
    count = count + granted
    redis.call('HSET', key, 'w', string.format('%.17g', ws), 'c', string.format('%.17g', count))
    redis.call('PEXPIRE', key, ttl(ws + 2 * pu - now))
  end
else
  wait = left
end
return {granted, math.max(0, limit - count), ms(wait), ms(left)}
