#!/usr/bin/env bash
# A node's CPU under its GC policy (-gc-headroom's default) and under Go's
# default (GOGC=100 in its environment), in one run: for each, starts
# sluiced on the in-memory store (-lease-idle 1h, so that every key stays
# active), fills it with KEYS new keys (batches of 100 at 25k keys/s, open
# loop: the first touches, where the heap grows), then drives RATE single
# checks per second, open loop, uniform over those keys for DURATION. For
# both phases it prints the node's CPU per check (/proc, via sluice-bench
# -server-pid), its collector's share of it (go_gc_cpu_seconds_total of
# /metrics, the runtime's estimate) and the collections run; at the end,
# the node's resident set.
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
addr=127.0.0.1:18111
gc() { curl -s "http://$addr/metrics" | awk '$1 == "go_gc_cpu_seconds_total" {c=$2} $1 == "go_gc_duration_seconds_count" {n=$2} END {print c, n}'; }
report() { # label run.json gc-before gc-after
  python3 - "$@" <<'PY'
import json, sys
label, run, (c0, n0), (c1, n1) = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3].split(), sys.argv[4].split()
d = run["decisions"]
print(f"{label}: {d} checks ({run.get('missed', 0)} missed), node CPU {run['server_cpu_s']*1e6/d:.1f} µs/check, GC {(float(c1)-float(c0))*1e6/d:.1f} µs/check, {int(n1)-int(n0)} collections")
PY
}
for policy in "GOGC=100" "default"; do
  env=()
  [ "$policy" = default ] || env=("$policy")
  env "${env[@]}" "$tmp/sluiced" -listen $addr -rules "$tmp/rules.yaml" -lease-idle 1h -log-level error &
  pid=$!
  until curl -sf "http://$addr/readyz" >/dev/null; do sleep 0.1; done # a real process: wait for it
  g0=$(gc)
  "$tmp/sluice-bench" run -addr $addr -driver batch -batch 100 -dist cycle -keys "$keys" -prefix k- \
    -mode open -rate 250 -duration "$((keys / 25000))s" -workers 16 -conns 4 -server-pid "$pid" -json "$tmp/fill.json" >/dev/null
  g1=$(gc)
  "$tmp/sluice-bench" run -addr $addr -driver single -dist uniform -keys "$keys" -prefix k- \
    -mode open -rate "$rate" -duration "$dur" -workers 64 -conns 16 -server-pid "$pid" -json "$tmp/run.json" >/dev/null
  g2=$(gc)
  report "$policy fill  " "$tmp/fill.json" "$g0" "$g1"
  report "$policy checks" "$tmp/run.json" "$g1" "$g2"
  echo "$policy RSS $(($(awk '/VmRSS/ {print $2}' "/proc/$pid/status") >> 10)) MiB"
  kill "$pid"
  wait "$pid" || true
  pid=
done
