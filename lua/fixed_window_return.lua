-- fixed_window return: holder's loan in the current window ends; the
-- count drops by min(n, lent), never below 0. Mirrors
-- lease.FixedWindowState.Return: tokens granted in an earlier window are
-- not returned to this one. Joined after prelude.lua and leased.lua.
--
-- KEYS[1]  string (see fixed_window_lease.lua)
-- ARGV     limit, period_us, capacity, holder, tokens
-- returns  the tokens given back
local pu, n = pf, ARGV[5] + 0
local H = loans()
local st, ls = H.read(redis.call('GET', key), 'fw')
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
