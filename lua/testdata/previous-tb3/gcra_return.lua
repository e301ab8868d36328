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
    el[2 * m + 1], el[2 * m + 2] = a, x
    m = m + 1
  end
  if pos <= size then break end
  if exp <= now or lent == 0 then return 0 end -- nothing lent to holder: nothing changes
  -- end_loan (see token_bucket_return.lua)
  local back = lent
  if n < back then back = n end
  if lent > back then
    el[1], el[2] = lent - back, math.min(exp, now)
  else
    m = m - 1
    el[1], el[2] = el[2 * m + 1], el[2 * m + 2]
  end
  -- tat_back
  local base = math.max(tat, now)
  tat = base - math.min(math.floor(back * pf / lf), base - now)
  -- trim (see gcra_lease.lua)
  local i = 2
  while i < 2 * m do
    local j = i + 2
    while j <= 2 * m do
      if el[i] == el[j] then
        el[i - 1] = el[i - 1] + el[j - 1]
        el[j - 1], el[j] = el[2 * m - 1], el[2 * m]
        m = m - 1
      else
        j = j + 2
      end
    end
    i = i + 2
  end
  while m > 0 do
    local o = 2
    for k = 4, 2 * m, 2 do
      if el[k] < el[o] then o = k end
    end
    local x = el[o]
    local a = 0
    for k = 2, 2 * m, 2 do
      if el[k] >= x then a = a + el[k - 1] end
    end
    local c = x + math.ceil(a * pf / lf)
    if c > now then
      if m <= max_ended then break end
      tat = math.max(tat, c)
    end
    el[o - 1], el[o] = el[2 * m - 1], el[2 * m]
    m = m - 1
  end
  if tat <= now and m == 0 then
    redis.call('DEL', key) -- full and nothing lent: the same as no state
    return back
  end
  -- spent_by and write
  local e, s = tat, head('gc', tat, 0, 0)
  for k = 2, 2 * m, 2 do
    local x = el[k]
    local a = 0
    for j = 2, 2 * m, 2 do
      if el[j] >= x then a = a + el[j - 1] end
    end
    local c = x + math.ceil(a * pf / lf)
    if c > e then e = c end
    s = s .. pack_loan('', el[k - 1], x, 0, tat, false)
  end
  redis.call('SET', key, s, 'PX', ttl(e - now))
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
