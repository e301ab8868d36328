#!/usr/bin/env bash
# The node's CPU per call and calls/s of the Envoy rate limit service on
# each transport (lean, grpc) and of an HTTP check, driven by C clients
# whose own CPU is small next to grpc-go's client: h2load (nghttp2-client)
# for the RLS, wrk with check.lua (POST /v1/check) for HTTP.
#   node/rls/testdata/h2load-cpu.sh
# (N calls per run, 200000; ROUNDS, 3; CONNS x STREAMS calls in flight,
# 2 x 16 for h2load, and CONNS*STREAMS connections for wrk, HTTP/1.1
# having one call in flight per connection; SLUICED, a built sluiced,
# else built here.)
# Two sluiced processes (memory store), one per -rls-transport, each with
# the same never-reached limit over RLS (domain bench, descriptor
# user=never) and over HTTP (rule per-key, key never); HTTP is driven on
# the lean node. Rounds alternate lean, grpc, http so that a shared
# machine's load shifts touch all three alike; each run's node CPU is
# utime+stime of the node's /proc/<pid>/stat before and after (clock ticks),
# over the calls the node counted (its /metrics: allowed or denied; a
# denial, on a limit never reached, is shown), and calls/s is those calls
# over the client's wall time. Medians of the rounds at the end.
# Needs h2load (apt install nghttp2-client) and wrk (apt install wrk).
set -euo pipefail
n=${N:-200000} rounds=${ROUNDS:-3} conns=${CONNS:-2} streams=${STREAMS:-16}
for b in h2load wrk curl; do
  command -v $b >/dev/null || { echo "$b is missing (apt install nghttp2-client wrk curl)" >&2; exit 1; }
done
cd "$(git rev-parse --show-toplevel)"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
bin=${SLUICED:-}
if [ -z "$bin" ]; then
  go build -tags vtprotobuf -o "$tmp/sluiced" ./cmd/sluiced
  bin=$tmp/sluiced
fi
cat >"$tmp/rls.yaml" <<'EOF'
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
EOF
cat >"$tmp/rules.yaml" <<'EOF'
rules:
  - name: per-key
    algorithm: fixed_window
    limit: 1000000000
    period: 1s
EOF
# The RLS request body: one gRPC message (no compression, length 24) of
# RateLimitRequest{domain: "bench", descriptors: [{entries: [{key: "user",
# value: "never"}]}]}.
printf '\x00\x00\x00\x00\x18\x0a\x05bench\x12\x0f\x0a\x0d\x0a\x04user\x12\x05never' >"$tmp/rls.bin"
tck=$(getconf CLK_TCK)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
declare -A pid_of http_of rls_of
for tr in lean grpc; do
  hp=$(free_port) rp=$(free_port)
  "$bin" -listen 127.0.0.1:$hp -rules "$tmp/rules.yaml" -rls-listen 127.0.0.1:$rp -rls-config "$tmp/rls.yaml" \
    -rls-transport $tr -log-level warn 2>>"$tmp/node-$tr.log" &
  pids+=($!)
  pid_of[$tr]=$! http_of[$tr]=127.0.0.1:$hp rls_of[$tr]=127.0.0.1:$rp
  for i in $(seq 100); do
    curl -sf -o /dev/null "http://127.0.0.1:$hp/healthz" && (echo >/dev/tcp/127.0.0.1/$rp) 2>/dev/null && break
    [ "$i" = 100 ] && { echo "sluiced ($tr) did not start:" >&2; cat "$tmp/node-$tr.log" >&2; exit 1; }
    sleep 0.1 # a process starting: nothing to wait on but its ports
  done
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
answers() { # node allowed-series denied-series -> "allowed denied" (0 when absent)
  curl -sf "http://$1/metrics" | awk -v a="$2" -v d="$3" '
    index($0, a " ") == 1 {x = $2}
    index($0, d " ") == 1 {y = $2}
    END {printf "%d %d\n", x + 0, y + 0}'
}
now_ns() { date +%s%N; }

cat >"$tmp/check.lua" <<'EOF'
-- POST /v1/check until this thread has had its quota of 200 answers,
-- then stop the thread and say so in a file (wrk runs for its -d
-- otherwise).
local quota = tonumber(os.getenv("WRK_QUOTA"))
local dir = os.getenv("WRK_DONE_DIR")
local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
end
wrk.method = "POST"
wrk.path = "/v1/check"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"rule":"per-key","key":"never"}'
local n = 0
function response(status, headers, body)
  if status ~= 200 and status ~= 429 then
    error("/v1/check answered " .. status)
  end
  n = n + 1
  if n == quota then
    io.open(dir .. "/" .. id, "w"):close()
    wrk.thread:stop()
  end
end
EOF

# run KIND: one run of n calls; prints "calls cpu_ns wall_ns".
run() {
  local kind=$1 node pid series ok0 no0 cpu0 t0 t1 cpu1 ok1 no1
  case $kind in
    lean | grpc) node=${http_of[$kind]} pid=${pid_of[$kind]} series=('sluice_rls_calls_total{code="OK"}' 'sluice_rls_calls_total{code="OVER_LIMIT"}') ;;
    http) node=${http_of[lean]} pid=${pid_of[lean]} series=('sluice_checks_total{rule="per-key",decision="allowed"}' 'sluice_checks_total{rule="per-key",decision="denied"}') ;;
  esac
  read -r ok0 no0 < <(answers "$node" "${series[@]}")
  cpu0=$(cpu_ticks "$pid") t0=$(now_ns)
  case $kind in
    lean | grpc)
      h2load -n "$n" -c "$conns" -m "$streams" -d "$tmp/rls.bin" -H 'content-type: application/grpc' -H 'te: trailers' \
        "http://${rls_of[$kind]}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" >"$tmp/client.out" 2>&1 ||
        { cat "$tmp/client.out" >&2; exit 1; }
      grep -q "status codes: $n 2xx" "$tmp/client.out" || { cat "$tmp/client.out" >&2; exit 1; }
      t1=$(now_ns)
      ;;
    http)
      local threads=$conns wc=$((conns * streams)) done_dir="$tmp/wrk-done"
      rm -rf "$done_dir" && mkdir "$done_dir"
      WRK_QUOTA=$((n / threads)) WRK_DONE_DIR=$done_dir wrk -t "$threads" -c "$wc" -d 600s -s "$tmp/check.lua" \
        "http://$node" >"$tmp/client.out" 2>&1 &
      local wpid=$!
      while [ "$(ls "$done_dir" | wc -l)" -lt "$threads" ]; do
        kill -0 $wpid 2>/dev/null || { cat "$tmp/client.out" >&2; exit 1; }
        sleep 0.01 # wrk has no request count: its threads say when they are done
      done
      t1=$(now_ns)
      kill -INT $wpid
      wait $wpid || true
      ;;
  esac
  cpu1=$(cpu_ticks "$pid")
  read -r ok1 no1 < <(answers "$node" "${series[@]}")
  local calls=$((ok1 - ok0 + no1 - no0))
  if [ "$calls" -lt "$n" ]; then
    echo "$kind: the node counted $calls calls answered (allowed or denied), want $n" >&2
    cat "$tmp/client.out" >&2
    curl -sf "http://$node/metrics" | grep -E '^sluice_(rls_calls|checks)_total' >&2
    cat "$tmp/node-"*.log >&2
    exit 1
  fi
  echo "$calls $((no1 - no0)) $(((cpu1 - cpu0) * 1000000000 / tck)) $((t1 - t0))"
}

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
declare -A cpu rate
echo "sluiced ${SLUICED:-of tree $(git rev-parse --short HEAD)}; N=$n calls per run, h2load -c $conns -m $streams, wrk -t $conns -c $((conns * streams)); $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for kind in lean grpc http; do
    read -r calls denied cpu_ns wall_ns < <(run $kind)
    c=$(awk -v c="$cpu_ns" -v n="$calls" 'BEGIN {printf "%.1f", c / n / 1000}')
    s=$(awk -v w="$wall_ns" -v n="$calls" 'BEGIN {printf "%.0f", n / (w / 1e9)}')
    cpu[$kind]+="$c "
    rate[$kind]+="$s "
    printf 'round %d %-4s %7d calls  node %5s µs/call  %6s calls/s  %s\n' "$r" "$kind" "$calls" "$c" "$s" \
      "$([ "$denied" = 0 ] || echo "($denied denied on a limit never reached)")"
  done
done
echo "median of $rounds:"
for kind in lean grpc http; do
  mc=$(echo ${cpu[$kind]} | tr ' ' '\n' | median) ms=$(echo ${rate[$kind]} | tr ' ' '\n' | median)
  declare "m_cpu_$kind=$mc" "m_rate_$kind=$ms"
  printf '  %-4s node %5s µs/call  %6s calls/s\n' "$kind" "$mc" "$ms"
done
awk -v l="$m_rate_lean" -v g="$m_rate_grpc" -v h="$m_rate_http" -v lc="$m_cpu_lean" -v gc="$m_cpu_grpc" -v hc="$m_cpu_http" 'BEGIN {
  printf "  over http: calls/s lean %.2f, grpc %.2f; node CPU per call lean %.2f, grpc %.2f\n", l / h, g / h, lc / hc, gc / hc
}'
