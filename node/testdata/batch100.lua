-- wrk script: POST /v1/checks with 100 checks over 100 keys.
--   wrk -t1 -c32 -d10s -s node/testdata/batch100.lua http://127.0.0.1:18080/v1/checks
local parts = {}
for i = 1, 100 do
  parts[#parts + 1] = string.format('{"rule":"bench","key":"k-%d"}', i)
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"checks":[' .. table.concat(parts, ",") .. ']}'
