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
local H = loans()
local st, ls = H.read(redis.call('GET', key), 'sw')
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
