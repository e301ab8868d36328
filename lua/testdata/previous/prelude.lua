-- prelude: joined in front of every script when it is embedded (see
-- scripts in store.go), so each script file holds only its own logic while
-- Redis still runs one self-contained script per file.
--
-- now is Redis TIME in unix µs: the only clock any script reads.
local key = KEYS[1]
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

local function fmt(x)
  return string.format('%.17g', x)
end
