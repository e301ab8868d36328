-- token_bucket lease: refill, then grant min(want, avail) if avail >= need.
-- Mirrors lease.TokenBucketState.Lease operation for operation (float64,
-- microseconds), so both stores compute the same values.
--
-- KEYS[1]  hash {t = tokens (fractional), u = time of that level, unix µs}
-- ARGV     limit, period_us, capacity, want, need
-- returns  {granted, remaining, wait_ms, reset_ms}
--
-- An absent key is a full bucket. The key is written only when tokens are
-- granted, and expires when the bucket would be full again.
local key = KEYS[1]
local lf, pf, cf = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
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

local tokens, updated = cf, 0
local st = redis.call('HMGET', key, 't', 'u')
if st[1] then
  updated = tonumber(st[2])
  local elapsed = now - updated
  if elapsed < 0 then elapsed = 0 end
  tokens = math.min(cf, tonumber(st[1]) + elapsed * lf / pf)
end
local avail = math.floor(tokens)

local granted, wait = 0, 0
if need > cf then
  wait = pf
elseif avail >= need then
  granted = math.min(want, avail)
  if granted > 0 then
    tokens = tokens - granted
    updated = math.max(updated, now)
    redis.call('HSET', key, 't', string.format('%.17g', tokens), 'u', string.format('%.17g', updated))
    redis.call('PEXPIRE', key, ttl(updated - now + (cf - tokens) * pf / lf))
  end
else
  wait = (need - tokens) * pf / lf
end
return {granted, math.floor(tokens), ms(wait), ms((cf - tokens) * pf / lf)}
