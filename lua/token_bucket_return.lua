-- token_bucket return: holder's loan ends; tokens = min(capacity, stored
-- level refilled + min(n, lent)), the rest of the loan counts as spent now
-- (an ended loan). Mirrors lease.TokenBucketState.Return. Joined after
-- prelude.lua and leased.lua.
--
-- KEYS[1]  string (see token_bucket_lease.lua)
-- ARGV     limit, period_us, capacity, holder, tokens
-- returns  the tokens given back
local n = ARGV[5] + 0

local fast = true -- false: every call takes the general path (tests)
local v = redis.call('GET', key)

-- The fast path answers the states the lease script's fast path leaves:
-- no state, or the caller's loan first and only ended loans after it, by
-- expiry (el: their lent and expiry, two entries each, from the second
-- pair on; the first is for what the caller's loan leaves). It is the general path
-- below, operation for operation, for those states, and writes the same
-- bytes; any other state breaks out to the general path.
repeat -- the fast path (break: the general path)
  if not fast then break end
  if not v or n < 0 then return 0 end
  local h, lvl, u, pos = struct.unpack('<BdI7', v)
  if h % 2 == 1 then pos = pos + 4 + W[4 + (h - h % 2) / 2 % 4] end -- the last call: a return drops it
  local size = #v
  if pos > size then return 0 end -- nothing lent
  local kind = string.byte(v, pos)
  if kind < 64 or holder == '' then break end
  local k4 = (kind - kind % 4) / 4 -- the width codes, without math.floor
  local id, lent, d1
  id, lent, d1, pos = struct.unpack('<c8' .. W[kind % 4] .. W[k4 % 4], v, pos + 1)
  if kind >= 128 then pos = pos + W[4 + (k4 - k4 % 4) / 4 % 4] end -- its last spend: it ends
  if id ~= holder then break end
  local exp = u
  if d1 % 2 == 0 then exp = u + d1 / 2 else exp = u - (d1 + 1) / 2 end
  local el, m = {0, 0, 0, 0, 0, 0, 0, 0}, 1 -- m: the pairs in el, the first included
  while pos <= size do
    kind = string.byte(v, pos)
    if kind >= 64 then break end -- another holder's loan
    local a, x
    a, x, pos = struct.unpack('<' .. W[kind % 4] .. W[(kind - kind % 4) / 4 % 4], v, pos + 1)
    if x % 2 == 0 then x = u + x / 2 else x = u - (x + 1) / 2 end
    if m > 1 and x > el[2 * m] then
      pos = 0 -- not by expiry (an older release wrote it): the general path sorts them
      break
    end
    el[2 * m + 1], el[2 * m + 2] = a, x
    m = m + 1
  end
  if pos <= size then break end
  local t = now -- updated
  if u > now then t = u end
  if exp <= t or lent == 0 then return 0 end -- nothing lent to holder: nothing changes
  local elapsed = now - u
  if elapsed < 0 then elapsed = 0 end
  local raw = math.min(cf, lvl + elapsed * lf / pf)
  -- end_loan: min(n, lent) comes back, the rest ends at t in the loan's
  -- place (t: no earlier than the ended loans); without a rest the loan
  -- goes
  local back = lent
  if n < back then back = n end
  local f = 1 -- the first pair in el
  if lent > back then
    el[1], el[2] = lent - back, math.min(exp, t)
  else
    f = 2
  end
  local tokens = math.min(cf, raw + back)
  -- trim (see token_bucket_lease.lua): merge the loans of one time
  -- (neighbours), then drop the oldest, the last, while it caps nothing
  local k, a = 0, 0 -- k: the pairs kept
  for i = f, m do
    if k > 0 and el[2 * k] == el[2 * i] then
      el[2 * k - 1] = el[2 * k - 1] + el[2 * i - 1]
    else
      k = k + 1
      el[2 * k - 1], el[2 * k] = el[2 * i - 1], el[2 * i]
    end
    a = a + el[2 * i - 1]
  end
  m = k
  while m > 0 do
    local c = cf - a + (t - el[2 * m]) * lf / pf
    if c < cf then
      if m <= max_ended then break end
      tokens = math.min(tokens, c)
    end
    a = a - el[2 * m - 1]
    m = m - 1
  end
  if tokens >= cf and m == 0 then
    redis.call('DEL', key) -- full and nothing lent: the same as no state
    return back
  end
  -- full_in, a running sum by expiry, and write
  local d = (cf - tokens) * pf / lf
  local parts = {head('tb', tokens, t, 0, 0)}
  a = 0
  for i = 1, m do
    local x = el[2 * i]
    a = a + el[2 * i - 1]
    local c = (x - t) + a * pf / lf
    if c > d then d = c end
    parts[i + 1] = pack_loan('', el[2 * i - 1], x, 0, t, false)
  end
  redis.call('SET', key, table.concat(parts), 'PX', ttl(t - now + d))
  return back
until true

-- The general path.
local H = loans()
local st, ls = H.read(v, 'tb')
if not st.t or n < 0 then
  return 0
end
if H.lent_to(ls, holder, math.max(st.u, now)) == 0 then
  return 0 -- nothing lent to holder: nothing comes back, nothing changes
end
local updated = st.u
local elapsed = now - updated
if elapsed < 0 then elapsed = 0 end
local raw = math.min(cf, st.t + elapsed * lf / pf)
updated = math.max(updated, now)
local back
ls, back = H.end_loan(ls, n, updated)
ls = H.retire(ls, updated)
local tokens = math.min(cf, raw + back)
ls, tokens = H.trim(ls, updated, 'tb', tokens)
if tokens >= cf and #ls == 0 then
  redis.call('DEL', key) -- full and nothing lent: the same as no state
  return back
end
local d = H.full_in(ls, (cf - tokens) * pf / lf, updated)
H.write(head('tb', tokens, updated, 0, 0), ls, updated, false, ttl(updated - now + d))
return back
