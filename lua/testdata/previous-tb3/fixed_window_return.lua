-- fixed_window return: holder's loan ends, its shares ahead included; the
-- count drops by min(n, lent in the current window), never below 0.
-- Mirrors lease.FixedWindowState.Return: the key's window first becomes
-- now's (see fixed_window_lease.lua), so tokens granted in an earlier
-- window are not returned to this one, and a share lent into this window
-- is. Joined after prelude.lua and leased.lua.
--
-- KEYS[1]  string (see fixed_window_lease.lua)
-- ARGV     limit, period_us, capacity, holder, tokens
-- returns  the tokens given back
--
-- The key is written only when holder has a loan in it (one that a later
-- window keeps only by its share), with its expiry set as the lease
-- script sets it (the period may have changed since the last write).
local pu, n = pf, ARGV[5] + 0

local fast = true -- false: every call takes the general path (tests)
local v = redis.call('GET', key)

-- The fast path answers the states the lease script's fast path leaves
-- (no state, or the caller's loan the only one, with or without a share)
-- with locals, and writes the same bytes as the general path; any other
-- state breaks out to it.
repeat -- the fast path (break: the general path)
  if not fast then break end
  if not v or n < 0 or holder == '' then return 0 end
  local h, w, pos = struct.unpack('<BI7', v)
  local count
  count, pos = struct.unpack('<' .. W[h % 4], v, pos)
  if pos > #v then return 0 end -- nothing lent to holder
  local kind = string.byte(v, pos)
  local id, lent, share, e = nil, 0, 0, 0
  if kind >= 128 then
    id, lent, share, e, pos = struct.unpack('<c8' .. W[kind % 4] .. W[math.floor(kind / 4) % 4] .. W[math.floor(kind / 16) % 4], v, pos + 1)
    e = w + e
  else
    id, lent, pos = struct.unpack('<c8' .. W[kind % 4], v, pos + 1)
  end
  if id ~= holder or pos <= #v then break end
  local ws = now - math.fmod(now, pu)
  if w < ws then -- roll
    if share == 0 or e < ws + pu then return 0 end -- the loan ended with its window
    w, count, lent = ws, share, share
  end
  local back = lent -- take
  if n < back then back = n end
  redis.call('SET', key, head('fw', w, math.max(0, count - back)), 'PX', ttl(w + 2 * pu - now))
  return back
until true

-- The general path.
local H = loans()
local st, ls = H.read(v, 'fw')
if not v or n < 0 or holder == '' then
  return 0
end
ls = H.roll(st, ls, now)
if not H.find(ls, holder) then
  return 0
end
local back
ls, back = H.take(ls, n)
H.write(head('fw', st.w, math.max(0, st.c - back)), ls, st.w, true, ttl(H.fw_expiry(st.w, ls) - now))
return back
