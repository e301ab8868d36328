-- token_bucket return: tokens = min(capacity, level + n). Mirrors
-- lease.TokenBucketState.Return.
--
-- KEYS[1]  hash {t = tokens (fractional), u = time of that level, unix µs}
-- ARGV     limit, period_us, capacity, tokens
-- returns  1, or 0 when the key had expired (a full bucket: nothing to do)
local key = KEYS[1]
local lf, pf, cf = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local st = redis.call('HMGET', key, 't', 'u')
if not st[1] or n <= 0 then
  return 0
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
-- ttl is an expiry argument: a duration in µs as whole milliseconds,
-- rounded up, plus 1ms so that the key outlives its state; capped.
local function ttl(us)
  if not (us > 0) then return '1' end
  return string.format('%d', math.min(math.ceil(us / 1000), 9223372036854) + 1)
end
local updated = tonumber(st[2])
local elapsed = now - updated
if elapsed < 0 then elapsed = 0 end
local tokens = math.min(cf, tonumber(st[1]) + elapsed * lf / pf)
tokens = math.min(cf, tokens + n)
if tokens >= cf then
  redis.call('DEL', key) -- full: the same as no state
  return 1
end
updated = math.max(updated, now)
redis.call('HSET', key, 't', string.format('%.17g', tokens), 'u', string.format('%.17g', updated))
redis.call('PEXPIRE', key, ttl(updated - now + (cf - tokens) * pf / lf))
return 1
