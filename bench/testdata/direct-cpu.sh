#!/usr/bin/env bash
# A node on the in-memory store deciding each check in the store (the
# default) against one leasing into buckets as on Redis (-memory-leases),
# in one run: for each, starts sluiced, fills it with KEYS new keys
# (batches of 100 at 25k keys/s, open loop: first touches), then drives,
# closed loop, for DURATION each: single checks (64 in flight), Zipf over
# 10k keys of a rule of 100/s (hot keys over it, most under); batches of
# 100 (16 in flight) of the same; batches of 100 of a limit no workload
# reaches, uniform over 1000 keys (every check allowed: a leased bucket's
# best case, the suite's mem-batch100-leased). For each phase it prints
# the checks decided per second and the node's CPU per check (/proc, via
# sluice-bench -server-pid); at the end, the resident set.
#   bench/testdata/direct-cpu.sh [KEYS [DURATION]]   # defaults 200000 10s
set -euo pipefail
keys=${1:-200000} dur=${2:-10s}
cd "$(git rev-parse --show-toplevel)"
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
go build -o "$tmp/sluiced" ./cmd/sluiced
go build -o "$tmp/sluice-bench" ./cmd/sluice-bench
printf 'rules:\n  - name: bench\n    algorithm: token_bucket\n    limit: 100\n    period: 1s\n  - name: bench-big\n    algorithm: token_bucket\n    limit: 1000000000\n    period: 1s\n' >"$tmp/rules.yaml"
addr=127.0.0.1:18112
report() { # label run.json
  python3 - "$@" <<'PY'
import json, sys
label, run = sys.argv[1], json.load(open(sys.argv[2]))
d = run["decisions"]
print(f"{label}: {d} checks, {d / run['elapsed_ns'] * 1e9:.0f}/s, node CPU {run['server_cpu_s']*1e6/d:.2f} µs/check")
PY
}
for mode in in-store -memory-leases; do
  flags=()
  [ "$mode" = in-store ] || flags=("$mode")
  "$tmp/sluiced" -listen $addr -rules "$tmp/rules.yaml" -log-level error "${flags[@]}" &
  pid=$!
  until curl -sf "http://$addr/readyz" >/dev/null; do sleep 0.1; done # a real process: wait for it
  "$tmp/sluice-bench" run -addr $addr -driver batch -batch 100 -dist cycle -keys "$keys" -prefix f- \
    -mode open -rate 250 -duration "$((keys / 25000))s" -workers 16 -conns 4 -server-pid "$pid" -json "$tmp/fill.json" >/dev/null
  "$tmp/sluice-bench" run -addr $addr -driver single -dist zipf -keys 10000 -prefix z- \
    -duration "$dur" -workers 64 -conns 64 -server-pid "$pid" -json "$tmp/run.json" >/dev/null
  "$tmp/sluice-bench" run -addr $addr -driver batch -batch 100 -dist zipf -keys 10000 -prefix b- \
    -duration "$dur" -workers 16 -conns 16 -server-pid "$pid" -json "$tmp/batch.json" >/dev/null
  "$tmp/sluice-bench" run -addr $addr -rule bench-big -driver batch -batch 100 -dist uniform -keys 1000 -prefix g- \
    -duration "$dur" -workers 16 -conns 16 -server-pid "$pid" -json "$tmp/big.json" >/dev/null
  report "$mode fill            " "$tmp/fill.json"
  report "$mode single, zipf    " "$tmp/run.json"
  report "$mode batch100, zipf  " "$tmp/batch.json"
  report "$mode batch100, no limit" "$tmp/big.json"
  echo "$mode RSS $(($(awk '/VmRSS/ {print $2}' "/proc/$pid/status") >> 10)) MiB"
  kill "$pid"
  wait "$pid" || true
  pid=
done
