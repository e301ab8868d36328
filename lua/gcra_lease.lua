-- gcra lease: one theoretical arrival time (TAT). Mirrors
-- lease.GCRAState.Lease operation for operation (microseconds): with
-- base = max(TAT, now) and d = base - now, avail = floor(B - d*L/P); a
-- grant of g sets TAT = base + ceil(g*P/L) (whole µs, at most 2^61 µs ahead
-- of now); Wait = d - (B - need)*P/L; Reset = TAT_after - now. (The package
-- doc's T = P/L and tau = B*T, multiplied out.)
--
-- KEYS[1]  string: TAT in unix µs (an integer)
-- ARGV     limit, period_us, capacity (burst), want, need
-- returns  {granted, remaining, wait_ms, reset_ms}
--
-- An absent key (or a TAT not after now) is a full bucket. The key is
-- written only when tokens are granted, and expires at its TAT.
local key = KEYS[1]
local lf, pf, bf = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local want, need = tonumber(ARGV[4]), tonumber(ARGV[5])
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
local function avail(d)
  local a = math.floor(bf - d * lf / pf)
  if a < 0 then return 0 end
  return a
end

-- lease's maxTATAdvance: how far the TAT may run ahead of now (2^61 µs),
-- so that extreme policies cannot overflow.
local MAX_ADVANCE = 2305843009213693952
local tat = tonumber(redis.call('GET', key)) or 0
local base = math.max(tat, now)
local d = base - now
local a = avail(d)

local granted, wait = 0, 0
if need > bf then
  wait = pf
elseif a >= need then
  granted = math.min(want, a)
  if granted > 0 then
    local adv = math.ceil(math.min(granted * pf / lf, MAX_ADVANCE))
    tat = math.min(base + adv, now + MAX_ADVANCE)
    d = tat - now
    redis.call('SET', key, string.format('%d', tat), 'PX', ttl(d))
  end
else
  wait = d - (bf - need) * pf / lf
end
return {granted, avail(d), ms(wait), ms(d)}
