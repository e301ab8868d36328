-- fixed_window lease: windows aligned on multiples of the period since the
-- Unix epoch. Mirrors lease.FixedWindowState.Lease: avail = L - count;
-- Wait and Reset are the time to the end of the current window. Joined
-- after prelude.lua and leased.lua (capacity = limit here).
--
-- KEYS[1]  string: 'w' = start of the counted window, unix µs, 'c' =
--          count, loans: what the window lent each holder (see leased.lua)
-- ARGV     limit, period_us, capacity, holder, want, need, held, ttl_us, idle_us (ttl and idle unused)
-- returns  {granted, remaining, wait_ms, reset_ms, lent}
--
-- A count of an older window is 0 (and its loans are gone); a stored
-- window later than now's (a clock that went back) stays current. The key
-- is written only when tokens are granted, and expires two windows after
-- its window began.
local limit, pu = lf, pf
local want, need = ARGV[5] + 0, ARGV[6] + 0
local held = ARGV[7] + 0

local fast = true -- false: loans always through the general helpers (tests)
local v = redis.call('GET', key)

-- The fast path keeps the caller's loan as a local (own) when it is the
-- key's only loan, or there is none, and with other holders' loans reads
-- them all (ol: holder and lent, two entries each, in order; the caller's
-- at pair oi, 0 without) and settles the caller's as the general helpers
-- do (ls, H; fast off). Both write the same bytes.
local ws = now - math.fmod(now, pu) -- fmod is exact on doubles
local count = 0
local current = false
local own, ol, oi, n = 0, nil, 0, 0
local ls, H = nil, nil -- H: the general helpers, when ls
if v then
  local h, w, pos = struct.unpack('<BI7', v)
  if w >= ws then
    ws, current = w, true
    count, pos = struct.unpack('<' .. W[h % 4], v, pos)
    if not fast then
      H = loans()
      local _
      _, ls = H.read(v, 'fw')
    elseif pos <= #v then
      local id
      id, own, pos = struct.unpack('<c8' .. W[string.byte(v, pos) % 4], v, pos + 1)
      if id ~= holder or holder == '' or pos <= #v then
        ol, n = {id, own}, 1
        own = 0
        while true do
          if oi == 0 and holder ~= '' and ol[2 * n - 1] == holder then oi, own = n, ol[2 * n] end
          if pos > #v then break end
          ol[2 * n + 1], ol[2 * n + 2], pos = struct.unpack('<c8' .. W[string.byte(v, pos) % 4], v, pos + 1)
          n = n + 1
        end
      end
    end
  end
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
    if ls then
      ls = H.settle(ls, H.held_of(ls, held), granted, now, 0, 0, true)
      H.write(head('fw', ws, count), ls, 0, true, ttl(ws + 2 * pu - now))
    else
      local lb = '' -- the loans' bytes
      if holder ~= '' then
        own = math.min(own, held) + granted
        if not ol then
          lb = pack_loan(holder, own, 0, 0, 0, true)
        elseif oi > 0 then
          ol[2 * oi] = own
        else
          ol[2 * n + 1], ol[2 * n + 2] = holder, own
          n = n + 1
        end
      end
      for k = 2, 2 * n, 2 do
        lb = lb .. pack_loan(ol[k - 1], ol[k], 0, 0, 0, true)
      end
      redis.call('SET', key, head('fw', ws, count) .. lb, 'PX', ttl(ws + 2 * pu - now))
    end
  end
else
  wait = left
end
local lent = 0
if ls then
  lent = H.lent_to(ls, holder, -1)
elseif current and holder ~= '' then
  lent = own
end
return {granted, math.max(0, limit - count), ms(wait), ms(left), lent}
