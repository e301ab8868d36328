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
-- KEYS[1]  string: 'w' = start of the current window, unix µs, 'c' =
--          cur, 'p' = prev, loans: what the current window lent each
--          holder (see leased.lua)
-- ARGV     limit, period_us, capacity, holder, want, need, held, ttl_us,
--          idle_us, spent_before, call, unanswered (ttl to unanswered
--          unused), max_holders
-- returns  {granted, remaining, wait_ms, reset_ms, lent, crowded}
--
-- The key is written only when tokens are granted, and expires two
-- windows after its window began, when both counts have rolled out. A
-- holder without a loan in the current window, when max_holders (> 0)
-- holders have one, is crowded out (see token_bucket_lease.lua).
local limit = lf
local want, need = ARGV[5] + 0, ARGV[6] + 0
local held, maxh = ARGV[7] + 0, ARGV[13] + 0

local fast = true -- false: loans always through the general helpers (tests)
local v = redis.call('GET', key)

-- The fast path keeps the caller's loan as a local (own) when it is the
-- key's only loan, or there is none, and with other holders' loans reads
-- them all (ol, oi: see fixed_window_lease.lua); the general helpers (ls,
-- H; fast off) read and settle them. Both write the same bytes.
local ws = now - math.fmod(now, pf) -- fmod is exact on doubles
local prev, cur = 0, 0
local current = false
local own, ol, oi, n = 0, nil, 0, 0
local ls, H = nil, nil -- H: the general helpers, when ls
if v then
  local h, w, pos = struct.unpack('<BI7', v)
  local c, p
  c, p, pos = struct.unpack('<' .. W[h % 4] .. W[math.floor(h / 4) % 4], v, pos)
  if w >= ws then
    ws, cur, prev, current = w, c, p, true
    if not fast then
      H = loans()
      local _
      _, ls = H.read(v, 'sw')
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
  elseif w == ws - pf then
    prev = c
  end
end
-- crowd: the loans of the current window run (the caller's: own alone,
-- oi, or in ls)
local crowded = 0
if holder ~= '' and maxh > 0 and current then
  local nh, mine = 0, false
  if ls then
    nh, mine = #ls / 4, H.find(ls, holder) ~= nil
  elseif ol then
    nh, mine = n, oi > 0
  elseif v and own > 0 then
    nh, mine = 1, true
  end
  if nh >= maxh and not mine then crowded, holder, want = 1, '', need end
end
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
    if ls then
      ls = H.settle(ls, H.held_of(ls, held), granted)
      H.write(head('sw', ws, cur, prev), ls, 0, true, ttl(ws + 2 * pf - now))
    else
      local parts = {head('sw', ws, cur, prev)}
      if holder ~= '' then
        own = math.min(own, held) + granted
        if not ol then
          parts[2] = pack_loan(holder, own, 0, 0, 0, true)
        elseif oi > 0 then
          ol[2 * oi] = own
        else
          ol[2 * n + 1], ol[2 * n + 2] = holder, own
          n = n + 1
        end
      end
      for k = 1, n do
        parts[#parts + 1] = pack_loan(ol[2 * k - 1], ol[2 * k], 0, 0, 0, true)
      end
      redis.call('SET', key, table.concat(parts), 'PX', ttl(ws + 2 * pf - now))
    end
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
if ls then
  lent = H.lent_to(ls, holder, -1)
elseif current and holder ~= '' then
  lent = own
end
return {granted, avail(cur), ms(wait), ms(reset), lent, crowded}
