-- sliding_window return: holder's loan in the current window ends; cur
-- drops by min(n, lent), never below 0. Mirrors
-- lease.SlidingWindowState.Return. Joined after prelude.lua and
-- leased.lua.
--
-- KEYS[1]  string (see sliding_window_lease.lua)
-- ARGV     limit, period_us, capacity, holder, tokens
-- returns  the tokens given back (0: no state, the window the tokens were
--          counted in is no longer current, or nothing lent)
local n = ARGV[5] + 0

local fast = true -- false: every call takes the general path (tests)
local v = redis.call('GET', key)

-- The fast path answers the states the lease script's fast path leaves
-- (see fixed_window_return.lua); any other state breaks out to the
-- general path.
repeat -- the fast path (break: the general path)
  if not fast then break end
  if not v or n < 0 then return 0 end
  local h, w, pos = struct.unpack('<BI7', v)
  local cur, prev
  cur, prev, pos = struct.unpack('<' .. W[h % 4] .. W[(h - h % 4) / 4 % 4], v, pos)
  if w < now - math.fmod(now, pf) or cur == 0 then return 0 end
  if pos > #v or holder == '' then return 0 end -- nothing lent to holder
  local id, lent
  id, lent, pos = struct.unpack('<c8' .. W[string.byte(v, pos) % 4], v, pos + 1)
  if id ~= holder or pos <= #v then break end
  if lent == 0 then return 0 end
  local back = lent -- take
  if n < back then back = n end
  redis.call('SET', key, head('sw', w, math.max(0, cur - back), prev), 'KEEPTTL')
  return back
until true

-- The general path.
local H = loans()
local st, ls = H.read(v, 'sw')
if not st.w or n < 0 then
  return 0
end
local cur = st.c
if st.w < now - math.fmod(now, pf) or cur == 0 then
  return 0
end
if H.lent_to(ls, holder, -1) == 0 then
  return 0
end
local back
ls, back = H.take(ls, n)
H.write(head('sw', st.w, math.max(0, cur - back), st.p), ls, 0, true, nil)
return back
