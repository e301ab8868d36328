-- wrk script: POST one single check to the URL's path.
--   wrk -t1 -c32 -d10s -s node/testdata/post.lua http://127.0.0.1:18080/v1/check
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"rule":"bench","key":"u1"}'
