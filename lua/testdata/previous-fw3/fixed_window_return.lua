-- fixed_window return: holder's loan in the current window ends; the
-- count drops by min(n, lent), never below 0. Mirrors
-- lease.FixedWindowState.Return: tokens granted in an earlier window are
-- not returned to this one. Joined after prelude.lua and leased.lua.
--
-- KEYS[1]  string (see fixed_window_lease.lua)
-- ARGV     limit, period_us, capacity, holder, tokens
-- returns  the tokens given back
local pu, n = pf, ARGV[5] + 0

local fast = true -- false: every call takes the general path (tests)
local v = redis.call('GET', key)

-- The fast path answers the states the lease script's fast path leaves
-- (no state, or the caller's loan the only one) with locals, and writes
-- the same bytes as the general path; any other state breaks out to it.
repeat -- the fast path (break: the general path)
  if not fast then break end
  if not v or n < 0 then return 0 end
  local h, w, pos = struct.unpack('<BI7', v)
  local count
  count, pos = struct.unpack('<' .. W[h % 4], v, pos)
  if w < now - math.fmod(now, pu) or count == 0 then return 0 end
  if pos > #v or holder == '' then return 0 end -- nothing lent to holder
  local id, lent
  id, lent, pos = struct.unpack('<c8' .. W[string.byte(v, pos) % 4], v, pos + 1)
  if id ~= holder or pos <= #v then break end
  if lent == 0 then return 0 end
  local back = lent -- take
  if n < back then back = n end
  redis.call('SET', key, head('fw', w, math.max(0, count - back)), 'KEEPTTL')
  return back
until true

-- The general path.
local H = loans()
local st, ls = H.read(v, 'fw')
if not st.w or n < 0 then
  return 0
end
local count = st.c
if st.w < now - math.fmod(now, pu) or count == 0 then
  return 0
end
if H.lent_to(ls, holder, -1) == 0 then
  return 0
end
local back
ls, back = H.take(ls, n)
H.write(head('fw', st.w, math.max(0, count - back)), ls, 0, true, nil)
return back
