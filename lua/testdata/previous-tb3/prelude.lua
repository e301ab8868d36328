-- prelude: joined in front of every script when it is embedded (see
-- scripts in store.go), so each script file holds only its own logic while
-- Redis still runs one self-contained script per file.
--
-- now is Redis TIME in unix µs: the only clock any script reads.
--
-- Numbers arrive as strings (ARGV, TIME, scores): the scripts read them
-- by arithmetic (s + 0, or s * 1000000 + ...), Lua's own conversion,
-- which is tonumber's without its C call (about half of tonumber's cost
-- in Redis's Lua, some 900 instructions per argument).
local key = KEYS[1]
local clock = redis.call('TIME')
local now = clock[1] * 1000000 + clock[2]

-- ttl is an expiry argument: a duration in µs as whole milliseconds,
-- rounded up, plus 1ms so that the key outlives its state; capped.
local function ttl(us)
  if not (us > 0) then return '1' end
  local m = math.ceil(us / 1000)
  if m > 9223372036854 then m = 9223372036854 end -- min without a C call
  return string.format('%d', m + 1)
end

-- ms is a duration in µs as whole milliseconds, rounded up, capped like
-- lease's ceilMillis so that extreme policies cannot overflow.
local function ms(us)
  if not (us > 0) then return 0 end
  local m = math.ceil(us / 1000)
  if m > 9223372036854 then return 9223372036854 end
  return m
end

local function fmt(x)
  return string.format('%.17g', x)
end
