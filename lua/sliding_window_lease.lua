-- sliding_window lease: the weighted estimate of the previous and current
-- fixed windows. Mirrors lease.SlidingWindowState.Lease operation for
-- operation: with ws the current window's start, e = now - ws, pe = P - e,
-- avail = L - cur - ceil(prev*pe/P) (= floor(L - est) with
-- est = prev*(1 - e/P) + cur). Wait, when denied:
--   room = L - cur - need >= 0: in this window, pe - room*P/prev;
--   else cur <= L - need:       at the next window, pe;
--   else:                       in the next window, pe + P - (L-need)*P/cur.
-- Reset: pe + P if cur > 0, pe if only prev > 0, else 0.
--
-- KEYS[1]  hash {w = start of the current window, unix µs; c = cur; p = prev}
-- ARGV     limit, period_us, want, need
-- returns  {granted, remaining, wait_ms, reset_ms}
--
-- The key is written only when tokens are granted, and expires two
-- windows after its window began, when both counts have rolled out.
local key = KEYS[1]
local limit, pf = tonumber(ARGV[1]), tonumber(ARGV[2])
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

local ws = now - math.fmod(now, pf) -- fmod is exact on doubles
local prev, cur = 0, 0
local st = redis.call('HMGET', key, 'w', 'c', 'p')
if st[1] then
  local sw = tonumber(st[1])
  if sw >= ws then
    ws, cur, prev = sw, tonumber(st[2]), tonumber(st[3])
  elseif sw == ws - pf then
    prev = tonumber(st[2])
  end
end
local e = math.max(0, now - ws)
local pe = pf - e
local function avail(c)
  return math.max(0, limit - c - math.ceil(prev * pe / pf))
end

local granted, wait = 0, 0
local a = avail(cur)
if need > limit then
  wait = pf
elseif a >= need then
  granted = math.min(want, a)
  if granted > 0 then
    cur = cur + granted
    redis.call('HSET', key, 'w', string.format('%.17g', ws), 'c', string.format('%.17g', cur), 'p', string.format('%.17g', prev))
    redis.call('PEXPIRE', key, ttl(ws + 2 * pf - now))
  end
else
  local room, room2 = limit - cur - need, limit - need
  if room >= 0 then
    wait = pe - room * pf / prev
  elseif cur <= room2 then
    wait = pe
  else
    wait = pe + pf - room2 * pf / cur
  end
end

local reset = 0
if cur > 0 then
  reset = pe + pf
elseif prev > 0 then
  reset = pe
end
return {granted, avail(cur), ms(wait), ms(reset)}
