-- wrk script: each request carries X-API-Key drawn from Zipf(ZIPF_S) over
-- KEYS keys named PREFIX<rank> (a continuous approximation of Zipf by the
-- inverse of its power law's distribution over [1, KEYS+1), floored). Each
-- wrk thread draws its own sequence. Used by caddy-gateway.sh.
local n = tonumber(os.getenv("KEYS") or "1000000")
local s = tonumber(os.getenv("ZIPF_S") or "1.1")
local prefix = os.getenv("PREFIX") or ("w" .. os.time() .. "-")
local a = 1 - s
local top = (n + 1) ^ a

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("id", threads)
end

function init(args)
  math.randomseed(os.time() * 1009 + (id or 0) * 7919)
end

function request()
  local u, k = math.random()
  if a == 0 then -- s = 1: the distribution's inverse is an exponential
    k = math.floor(math.exp(u * math.log(n + 1)))
  else
    k = math.floor((1 + u * (top - 1)) ^ (1 / a))
  end
  if k > n then k = n end
  wrk.headers["X-API-Key"] = prefix .. k
  return wrk.format(nil)
end
