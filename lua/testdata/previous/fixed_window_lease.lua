-- fixed_window lease: windows aligned on multiples of the period since the
-- Unix epoch. Mirrors lease.FixedWindowState.Lease: avail = L - count;
-- Wait and Reset are the time to the end of the current window. Joined
-- after prelude.lua and leased.lua (capacity = limit here).
--
-- KEYS[1]  string {w = start of the counted window, unix µs; c = count;
--          '@'..holder = what the window lent each holder}
-- ARGV     limit, period_us, capacity, holder, want, need, held, ttl_us, idle_us (ttl and idle unused)
-- returns  {granted, remaining, wait_ms, reset_ms, lent}
--
-- A count of an older window is 0 (and its loans are gone); a stored
-- window later than now's (a clock that went back) stays current. The key
-- is written only when tokens are granted, and expires two windows after
-- its window began.
local limit, pu = lf, pf
local want, need = tonumber(ARGV[5]), tonumber(ARGV[6])
local held = tonumber(ARGV[7])

local ws = now - math.fmod(now, pu) -- fmod is exact on doubles
local count = 0
local st, ls = read()
local current = false
if st.w and tonumber(st.w) >= ws then
  ws, count, current = tonumber(st.w), tonumber(st.c), true
else
  ls = {}
end
local left = ws + pu - now

local granted, wait = 0, 0
if need > limit then
  wait = pu
elseif math.max(0, limit - count) >= need then
  granted = math.min(want, math.max(0, limit - count))
  if granted > 0 then
    count = count + granted
    current = true
    ls = settle(ls, held_of(ls, held), granted, now, 0, 0, true)
    write({'w', ws, 'c', count}, ls, ttl(ws + 2 * pu - now))
  end
else
  wait = left
end
local lent = 0
if current then lent = lent_to(ls, holder, -1) end
return {granted, math.max(0, limit - count), ms(wait), ms(left), lent}
