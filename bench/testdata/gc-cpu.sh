#!/usr/bin/env bash
# The node's CPU per check under its GC policy and under Go's default, in
# one run: for each, starts sluiced on the in-memory store (-lease-idle 1h,
# so that every key stays active), fills it with KEYS keys (batches of 100),
# then drives RATE single checks per second, open loop, uniform over those
# keys for DURATION, and prints the node's CPU per check (/proc, via
# sluice-bench -server-pid), its collector's CPU per check
# (go_gc_cpu_seconds_total from /metrics) and its resident set.
#   bench/testdata/gc-cpu.sh [KEYS [RATE [DURATION]]]   # defaults 1000000 2000 30s
set -euo pipefail
keys=${1:-1000000} rate=${2:-2000} dur=${3:-30s}
cd "$(git rev-parse --show-toplevel)"
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
go build -o "$tmp/sluiced" ./cmd/sluiced
go build -o "$tmp/sluice-bench" ./cmd/sluice-bench
printf 'rules:\n  - name: bench\n    algorithm: token_bucket\n    limit: 1000\n    period: 1s\n' >"$tmp/rules.yaml"
gccpu() { curl -s "http://127.0.0.1:18111/metrics" | awk '$1 == "go_gc_cpu_seconds_total" {print $2}'; }
for policy in "GOGC=100" "default"; do
  env=()
  [ "$policy" = default ] || env=("$policy")
  env "${env[@]}" "$tmp/sluiced" -listen 127.0.0.1:18111 -rules "$tmp/rules.yaml" -lease-idle 1h -log-level warn &
  pid=$!
  until curl -sf http://127.0.0.1:18111/readyz >/dev/null; do sleep 0.1; done # a real process: wait for it
  "$tmp/sluice-bench" run -addr 127.0.0.1:18111 -driver batch -batch 100 -dist cycle -keys "$keys" -prefix k- \
    -mode open -rate 400 -duration "$((keys / 40000 + 1))s" -workers 16 -conns 4 >/dev/null
  g0=$(gccpu)
  "$tmp/sluice-bench" run -addr 127.0.0.1:18111 -driver single -dist uniform -keys "$keys" -prefix k- \
    -mode open -rate "$rate" -duration "$dur" -workers 64 -conns 16 -server-pid "$pid" -json "$tmp/run.json" >/dev/null
  g1=$(gccpu)
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  python3 - "$tmp/run.json" "$g0" "$g1" "$rss" "$policy" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
n = r["decisions"]
cpu = r["server_cpu_s"]
gc = float(sys.argv[3]) - float(sys.argv[2])
print(f"{sys.argv[5]:9} checks {n}: node CPU {cpu*1e6/n:.1f} µs/check, GC {gc*1e6/n:.1f} µs/check, RSS {int(sys.argv[4])>>10} MiB")
PY
  kill "$pid"
  wait "$pid" || true
  pid=
done
