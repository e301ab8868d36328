-- sliding_window lease: the weighted estimate of the previous and current
-- fixed windows. Mirrors lease.SlidingWindowState.Lease operation for
-- operation: with ws the current window's start, e = now - ws, pe = P - e,
-- avail = L - cur - ceil(prev*pe/P) (= floor(L - est) with
-- est = prev*(1 - e/P) + cur). Wait, when denied:
--   room = L - cur - need >= 0: in this window, pe - room*P/prev;
--   else cur <= L - need:       at the next window, pe;
--   else:                       in the next window, pe + P - (L-need)*P/cur.
-- Reset: pe + P if cur > 0, pe if only prev > 0, else 0. Joined after
-- prelude.lua and leased.lua (capacity = limit here).
--
-- KEYS[1]  string {w = start of the current window, unix µs; c = cur; p = prev;
--          '@'..holder = what the current window lent each holder}
-- ARGV     limit, period_us, capacity, holder, want, need, held, ttl_us, idle_us (ttl and idle unused)
-- returns  {granted, remaining, wait_ms, reset_ms, lent}
--
-- The key is written only when tokens are granted, and expires two
-- windows after its window began, when both counts have rolled out.
local limit = lf
local want, need = tonumber(ARGV[5]), tonumber(ARGV[6])
local held = tonumber(ARGV[7])

local ws = now - math.fmod(now, pf) -- fmod is exact on doubles
local prev, cur = 0, 0
local st, ls = read()
local current = false
if st.w then
  local sw = tonumber(st.w)
  if sw >= ws then
    ws, cur, prev, current = sw, tonumber(st.c), tonumber(st.p), true
  elseif sw == ws - pf then
    prev = tonumber(st.c)
  end
end
if not current then ls = {} end
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
    current = true
    ls = settle(ls, held_of(ls, held), granted, now, 0, 0, true)
    write({'w', ws, 'c', cur, 'p', prev}, ls, ttl(ws + 2 * pf - now))
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
local lent = 0
if current then lent = lent_to(ls, holder, -1) end
return {granted, avail(cur), ms(wait), ms(reset), lent}
