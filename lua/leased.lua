-- leased: joined after the prelude in front of the eight lease and return
-- scripts. It parses their common arguments and holds the loan helpers,
-- which mirror lease/loans.go operation for operation.
--
-- ARGV     limit, period_us, capacity, holder, then per script:
--          lease:  want, need, held, ttl_us, idle_us
--          return: tokens
--
-- A loan is what the Store lent one holder and still counts against the
-- key's capacity: a hash field '@' .. holder = '<lent>,<expiry µs>' (expiry
-- 0 for the windowed algorithms, whose loans end with the window).
local lf, pf, cf = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local holder = ARGV[4]

-- read returns a hash's plain fields as a table, and its loans as a list of
-- {id, lent, exp}.
local function read()
  local h = redis.call('HGETALL', key)
  local st, ls = {}, {}
  for i = 1, #h, 2 do
    local f = h[i]
    if string.byte(f, 1) == 64 then -- '@'
      local l, e = string.match(h[i + 1], '^(%d+),(%d+)$')
      ls[#ls + 1] = {id = string.sub(f, 2), lent = tonumber(l), exp = tonumber(e)}
    else
      st[f] = h[i + 1]
    end
  end
  return st, ls
end

local function find(ls, id)
  for i, l in ipairs(ls) do
    if l.id == id then return i end
  end
  return nil
end

-- after is A(e): the tokens of the loans expiring at or after e.
local function after(ls, e)
  local a = 0
  for _, l in ipairs(ls) do
    if l.exp >= e then a = a + l.lent end
  end
  return a
end

-- lent_to is what ls lends id at t (t < 0 for windowed loans).
local function lent_to(ls, id, t)
  if id == '' then return 0 end
  local i = find(ls, id)
  if i and ls[i].exp > t then return ls[i].lent end
  return 0
end

local function prune(ls, t)
  local out = {}
  for _, l in ipairs(ls) do
    if l.exp > t then out[#out + 1] = l end
  end
  return out
end

-- settle records a grant of g to holder at t: its loan becomes
-- min(lent, held) + g, expiring at max(its expiry, t + ttl) (0 if
-- windowed).
local function settle(ls, held, g, t, ttl_us, windowed)
  if holder == '' then return ls end
  local i = find(ls, holder)
  local lent = 0
  if i then lent = math.min(ls[i].lent, held) end
  lent = lent + g
  local exp = 0
  if not windowed then
    exp = t + ttl_us
    if i then exp = math.max(exp, ls[i].exp) end
  end
  if i and lent > 0 then
    ls[i].lent, ls[i].exp = lent, exp
  elseif i then
    ls[i] = ls[#ls]
    ls[#ls] = nil
  elseif lent > 0 then
    ls[#ls + 1] = {id = holder, lent = lent, exp = exp}
  end
  return ls
end

-- take removes holder's loan and returns what a return of n gives back:
-- min(n, lent).
local function take(ls, n)
  local i = find(ls, holder)
  if holder == '' or not i then return ls, 0 end
  local back = math.min(n, ls[i].lent)
  ls[i] = ls[#ls]
  ls[#ls] = nil
  return ls, back
end

-- effective is ls as the caller (holding held, idle for idle_us) sees
-- it at t: the tokens of its loan it no longer holds were spent by t -
-- idle_us, so from then they count like a loan that ended. ls is not
-- changed. Mirrors lease's loans.effective.
local function effective(ls, held, idle_us, t)
  if holder == '' or idle_us <= 0 then return ls end
  local i = find(ls, holder)
  if not i or ls[i].lent <= held then return ls end
  local spent = t - idle_us
  if spent >= ls[i].exp then return ls end
  local out = {}
  for j, l in ipairs(ls) do
    out[j] = l
  end
  out[i] = {id = ls[i].id, lent = held, exp = ls[i].exp}
  out[#out + 1] = {id = '', lent = ls[i].lent - held, exp = spent}
  return out
end

-- cap_level caps a token_bucket level at t by the loans: at most
-- C - A(E) + (t - min(E, t))*L/P for every loan.
local function cap_level(ls, level, t)
  for _, l in ipairs(ls) do
    local s = math.min(l.exp, t)
    level = math.min(level, cf - after(ls, l.exp) + (t - s) * lf / pf)
  end
  return level
end

-- full_in is how long after t a token_bucket full in d µs by refill
-- alone is full with its running loans counted.
local function full_in(ls, d, t)
  for _, l in ipairs(ls) do
    if l.exp > t then
      d = math.max(d, (l.exp - t) + after(ls, l.exp) * pf / lf)
    end
  end
  return d
end

-- floor_tat is the lowest TAT a gcra key's loans allow at t.
local function floor_tat(ls, t)
  local f = 0
  for _, l in ipairs(ls) do
    local s = math.min(l.exp, t)
    f = math.max(f, s + math.ceil(after(ls, l.exp) * pf / lf))
  end
  return f
end

-- write replaces the hash with the fields of st (name, value pairs) and
-- the loans ls, expiring in ttl_ms.
local function write(st, ls, ttl_ms)
  for _, l in ipairs(ls) do
    st[#st + 1] = '@' .. l.id
    st[#st + 1] = string.format('%d,%d', l.lent, l.exp)
  end
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(st))
  redis.call('PEXPIRE', key, ttl_ms)
end
