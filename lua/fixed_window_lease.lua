-- fixed_window lease: windows aligned on multiples of the period since the
-- Unix epoch. Mirrors lease.FixedWindowState.Lease: avail = L - count;
-- Wait and Reset are the time to the end of the current window; then a
-- holder's shares ahead. Joined after prelude.lua and leased.lua
-- (capacity = limit here).
--
-- KEYS[1]  string: 'w' = start of the counted window, unix µs, 'c' =
--          count, loans: what the window lent each holder and its share
--          of each later window (see leased.lua)
-- ARGV     limit, period_us, capacity, holder, want, need, held, ttl_us,
--          idle_us, spent_before, call, unanswered (ttl to unanswered
--          unused), max_holders, ahead_windows, ahead_tokens
-- returns  {granted, remaining, wait_ms, reset_ms, lent, ahead_tokens,
--          ahead_windows, crowded}
--
-- A later window than the stored one starts with the shares lent into it
-- (its count their sum, each such holder's loan its share), the other
-- loans gone; a stored window later than now's (a clock that went back)
-- stays current. A holder's call sets its shares ahead: min(ahead_tokens,
-- L - the other holders' shares ahead) in each of the next ahead_windows
-- windows (none when 0). The key is written only when tokens are granted
-- or a share changes, and expires two windows after its window began or
-- a window after the last share's window ends, whichever is later. A
-- holder without a loan in the window, when max_holders (> 0) holders
-- have one, a share ahead included, is crowded out (see
-- token_bucket_lease.lua).
local limit, pu = lf, pf
local want, need = ARGV[5] + 0, ARGV[6] + 0
local held, maxh = ARGV[7] + 0, ARGV[13] + 0
local aw, at = 0, 0 -- most calls ask none: '0' is not converted
if ARGV[14] ~= '0' then aw, at = ARGV[14] + 0, ARGV[15] + 0 end

local fast = true -- false: loans always through the general helpers (tests)
local v = redis.call('GET', key)

-- The fast path keeps the caller's loan as locals (own lent, oshare, oe:
-- its share and the share's end; have: it has one) when it is the key's
-- only loan, or there is none; with other holders' loans and no share in
-- the key, for a caller asking none, it reads them all (ol: holder and
-- lent, two entries each, in order; the caller's at pair oi, 0 without).
-- Any other state takes the general path (ls, H; fast off). Both write
-- the same bytes.
local ws = now - math.fmod(now, pu) -- fmod is exact on doubles
local count = 0
local own, oshare, oe, have = 0, 0, 0, false
local ol, oi, n = nil, 0, 0
local ls, H = nil, nil -- H: the general helpers, when ls
local general = not fast
if v and not general then
  local h, w, pos = struct.unpack('<BI7', v)
  local c
  c, pos = struct.unpack('<' .. W[h % 4], v, pos)
  local size, shares = #v, false
  if w < ws then -- a later window: only the loans with a share carry over
    local p = pos
    while p <= size do
      local kind = string.byte(v, p)
      if kind >= 128 then
        shares = true
        break
      end
      p = p + 9 + W[4 + kind % 4]
    end
  end
  if w >= ws and pos > size then
    ws, count = w, c -- no loans
  elseif w < ws and not shares then
    -- nothing carries over: no state
  else
    local kind = string.byte(v, pos)
    local id
    if kind >= 128 then
      id, own, oshare, oe, pos = struct.unpack('<c8' .. W[kind % 4] .. W[math.floor(kind / 4) % 4] .. W[math.floor(kind / 16) % 4], v, pos + 1)
      oe = w + oe
    else
      id, own, pos = struct.unpack('<c8' .. W[kind % 4], v, pos + 1)
    end
    if id == holder and holder ~= '' and pos > #v then
      have = true -- the caller's loan, the only one
      if w >= ws then
        ws, count = w, c
      elseif oshare > 0 and oe >= ws + pu then
        own, count = oshare, oshare -- its share covers this window
      else
        own, oshare, oe, have = 0, 0, 0, false
      end
    elseif kind >= 128 then
      general = true
    else
      -- Other holders' loans (of this window, or a later one would have
      -- a share): the fast path takes them only without a share among
      -- them.
      ol, n = {id, own}, 1
      own = 0
      while true do
        if oi == 0 and holder ~= '' and ol[2 * n - 1] == holder then oi, own = n, ol[2 * n] end
        if pos > #v then break end
        kind = string.byte(v, pos)
        if kind >= 128 then
          general = true
          break
        end
        ol[2 * n + 1], ol[2 * n + 2], pos = struct.unpack('<c8' .. W[kind % 4], v, pos + 1)
        n = n + 1
      end
      if general then
        ol, oi, n, own = nil, 0, 0, 0
      elseif holder ~= '' and aw > 0 and at > 0 then
        general = true -- the caller asks a share
        ol, oi, n, own = nil, 0, 0, 0
      else
        ws, count = w, c
      end
    end
  end
end
if general then
  H = loans()
  local st
  st, ls = H.read(v, 'fw')
  ls = H.roll(st, ls, now)
  ws, count = st.w, st.c
end
-- crowd: every loan of the window runs (the caller's: have, oi, or in
-- ls)
local crowded = 0
if holder ~= '' and maxh > 0 then
  local nh, mine = 0, have
  if ls then
    nh, mine = #ls / 4, H.find(ls, holder) ~= nil
  elseif ol then
    nh, mine = n, oi > 0
  elseif have then
    nh = 1
  end
  if nh >= maxh and not mine then crowded, holder, want = 1, '', need end
end
local left = ws + pu - now

local granted, wait = 0, 0
if need > limit then
  wait = pu
elseif math.max(0, limit - count) >= need then
  granted = math.min(want, math.max(0, limit - count))
  if granted > 0 then
    count = count + granted
    if ls then
      ls = H.settle(ls, H.held_of(ls, held), granted)
    elseif holder == '' then
      -- no loan
    elseif ol then
      own = math.min(own, held) + granted
      if oi > 0 then
        ol[2 * oi] = own
      else
        ol[2 * n + 1], ol[2 * n + 2] = holder, own
        n = n + 1
      end
    else
      own = math.min(own, held) + granted -- settle: the share kept, its end 0
      oe, have = 0, true
    end
  end
else
  wait = left
end

-- The caller's shares ahead (set_ahead; none asked with ol).
local changed = granted > 0
local tokens, windows = 0, 0
if holder == '' or ol then
  -- none
elseif ls then
  local c
  ls, tokens, windows, c = H.set_ahead(ls, ws, aw, at)
  changed = changed or c
else
  if aw > 0 then tokens = math.min(at, limit) end -- no other holder's share
  if tokens > 0 then windows = aw end
  local e = ws + (windows + 1) * pu
  if have and oshare == tokens and (tokens == 0 or oe == e) then
    -- unchanged
  elseif not have then
    if tokens > 0 then own, oshare, oe, have, changed = 0, tokens, e, true, true end
  elseif tokens > 0 then
    oshare, oe, changed = tokens, e, true
  elseif own > 0 then
    oshare, oe, changed = 0, 0, true
  else
    own, have, changed = 0, false, true
  end
end

-- A write sets the key's expiry from the state and the period (a rule's
-- period may have changed since the last write: KEEPTTL could keep an
-- expiry the state outlives).
if changed then
  if ls then
    H.write(head('fw', ws, count), ls, ws, true, ttl(H.fw_expiry(ws, ls) - now))
  elseif ol then
    local parts = {head('fw', ws, count)}
    for k = 1, n do
      parts[k + 1] = pack_loan(ol[2 * k - 1], ol[2 * k], 0, 0, 0, true)
    end
    redis.call('SET', key, table.concat(parts), 'PX', ttl(ws + 2 * pu - now))
  else
    local lb, e = '', ws + 2 * pu
    if have then
      lb = pack_loan(holder, own, oe, oshare, ws, true)
      if oshare > 0 and oe + pu > e then e = oe + pu end
    end
    redis.call('SET', key, head('fw', ws, count) .. lb, 'PX', ttl(e - now))
  end
end
local lent = own -- 0 without a loan
if ls then lent = H.lent_to(ls, holder, -1) end
return {granted, math.max(0, limit - count), ms(wait), ms(left), lent, tokens, windows, crowded}
