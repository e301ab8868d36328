-- gcra return: holder's loan ends; TAT = max(now, max(TAT, now) -
-- floor(n'*P/L)), n' = min(n, lent); the rest of the loan counts as spent
-- now (an ended loan).
-- Mirrors lease.GCRAState.Return. Joined after prelude.lua and leased.lua.
--
-- KEYS[1]  string (see gcra_lease.lua)
-- ARGV     limit, period_us, capacity, holder, tokens
-- returns  the tokens given back
local n = ARGV[5] + 0

local fast = true -- false: every call takes the general path (tests)
local v = redis.call('GET', key)

-- The fast path answers the states the lease script's fast path leaves
-- (see token_bucket_return.lua). It is the general path below, operation
-- for operation, for those states, and writes the same bytes; any other
-- state breaks out to the general path.
repeat -- the fast path (break: the general path)
  if not fast then break end
  if not v or n < 0 then return 0 end
  local h, tat, pos = struct.unpack('<BI7', v)
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
  local exp = tat
  if d1 % 2 == 0 then exp = tat + d1 / 2 else exp = tat - (d1 + 1) / 2 end
  local el, m = {0, 0, 0, 0, 0, 0, 0, 0}, 1 -- m: the pairs in el, the first included
  while pos <= size do
    kind = string.byte(v, pos)
    if kind >= 64 then break end -- another holder's loan
    local a, x
    a, x, pos = struct.unpack('<' .. W[kind % 4] .. W[(kind - kind % 4) / 4 % 4], v, pos + 1)
    if x % 2 == 0 then x = tat + x / 2 else x = tat - (x + 1) / 2 end
    if m > 1 and x > el[2 * m] then
      pos = 0 -- not by expiry (an older release wrote it): the general path sorts them
      break
    end
    el[2 * m + 1], el[2 * m + 2] = a, x
    m = m + 1
  end
  if pos <= size then break end
  if exp <= now or lent == 0 then return 0 end -- nothing lent to holder: nothing changes
  -- end_loan (see token_bucket_return.lua)
  local back = lent
  if n < back then back = n end
  local f = 1 -- the first pair in el
  if lent > back then
    el[1], el[2] = lent - back, math.min(exp, now)
  else
    f = 2
  end
  -- tat_back
  local base = math.max(tat, now)
  tat = base - math.min(math.floor(back * pf / lf), base - now)
  -- trim (see token_bucket_return.lua)
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
    local c = el[2 * m] + math.ceil(a * pf / lf)
    if c > now then
      if m <= max_ended then break end
      tat = math.max(tat, c)
    end
    a = a - el[2 * m - 1]
    m = m - 1
  end
  if tat <= now and m == 0 then
    redis.call('DEL', key) -- full and nothing lent: the same as no state
    return back
  end
  -- spent_by, a running sum by expiry, and write
  local e, parts = tat, {head('gc', tat, 0, 0)}
  a = 0
  for i = 1, m do
    local x = el[2 * i]
    a = a + el[2 * i - 1]
    local c = x + math.ceil(a * pf / lf)
    if c > e then e = c end
    parts[i + 1] = pack_loan('', el[2 * i - 1], x, 0, tat, false)
  end
  redis.call('SET', key, table.concat(parts), 'PX', ttl(e - now))
  return back
until true

-- The general path.
local H = loans()
local st, ls = H.read(v, 'gc')
local tat = st.t
if not tat or n < 0 then
  return 0
end
if H.lent_to(ls, holder, now) == 0 then
  return 0 -- nothing lent to holder: nothing comes back, nothing changes
end
local back
ls, back = H.end_loan(ls, n, now)
ls = H.retire(ls, now)
tat = H.tat_back(tat, back, now)
ls, tat = H.trim(ls, now, 'gc', tat)
if tat <= now and #ls == 0 then
  redis.call('DEL', key) -- full and nothing lent: the same as no state
  return back
end
H.write(head('gc', tat, 0, 0), ls, tat, false, ttl(H.spent_by(ls, tat) - now))
return back
