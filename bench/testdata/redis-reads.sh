#!/usr/bin/env bash
# What one round trip costs Redis, against what its commands cost: a node on
# a redis-server of its own, then the naive counter (sluice-bench's naive
# driver: one pipelined INCRBY + EXPIRE per check) on the same server, each
# RATE single checks per second, open loop, uniform over KEYS keys new in
# the run, for DURATION; then both again in closed loop (128 in flight),
# Zipf over the same number of keys. For each run it prints Redis's CPU
# (INFO's used_cpu_user + used_cpu_sys) and the read and write system
# calls it made (/proc/<pid>/io: one read per batch of commands it finds on
# a connection, however many it holds), and the checks per second. The node
# also runs the open loop a second time over the same keys (node-warm: its
# loans already out, only renewals and top-ups reach Redis), after which
# the script's usec_per_call (INFO commandstats) is printed: what a call
# costs inside Redis when calls come a few hundred a second, between other
# processes' work on the same cores.
# PIN=1 runs redis-server on CPU 1 and the node and the generator on CPU 0,
# as if Redis had a machine of its own (needs taskset and 2 CPUs).
#   bench/testdata/redis-reads.sh [KEYS [RATE [DURATION]]]   # defaults 10000 5000 8s
set -euo pipefail
keys=${1:-10000} rate=${2:-5000} dur=${3:-8s}
cd "$(git rev-parse --show-toplevel)"
tmp=$(mktemp -d)
pid= rport=16411
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid"; redis-cli -p $rport shutdown nosave >/dev/null 2>&1; rm -rf "$tmp"' EXIT
go build -o "$tmp/sluiced" ./cmd/sluiced
go build -o "$tmp/sluice-bench" ./cmd/sluice-bench
printf 'rules:\n  - name: bench\n    algorithm: token_bucket\n    limit: 100\n    period: 1s\n    key: header:X-Bench-Key\n' >"$tmp/rules.yaml"
on0=() on1=()
if [ "${PIN:-0}" = 1 ]; then on0=(taskset -c 0) on1=(taskset -c 1); fi
"${on1[@]}" redis-server --port $rport --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --logfile "$tmp/redis.log" --dir "$tmp"
until redis-cli -p $rport ping >/dev/null 2>&1; do sleep 0.1; done
rpid=$(redis-cli -p $rport info server | awk -F: '/^process_id/ {print $2+0}')
addr=127.0.0.1:18112
"${on0[@]}" "$tmp/sluiced" -listen $addr -rules "$tmp/rules.yaml" -redis "redis://127.0.0.1:$rport/" -client-token bench -log-level error &
pid=$!
until curl -sf "http://$addr/readyz" >/dev/null; do sleep 0.1; done # a real process: wait for it
export SLUICE_CLIENT_TOKEN=bench
snap() {
  redis-cli -p $rport info cpu | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%s ", s}'
  awk '/^syscr/ {r = $2} /^syscw/ {w = $2} END {print r, w}' "/proc/$rpid/io"
}
measure() { # label, then sluice-bench run's arguments
  local label=$1 c0 r0 w0 c1 r1 w1
  shift
  read -r c0 r0 w0 < <(snap)
  "${on0[@]}" "$tmp/sluice-bench" run -json "$tmp/run.json" "$@" >/dev/null
  read -r c1 r1 w1 < <(snap)
  python3 - "$label" "$tmp/run.json" "$c0" "$c1" "$((r1 - r0))" "$((w1 - w0))" <<'PY'
import json, sys
label, run, c0, c1, reads, writes = sys.argv[1], json.load(open(sys.argv[2])), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
d, cpu = run["decisions"], (float(sys.argv[4]) - float(sys.argv[3])) * 1e6
print(f"{label:12} {d:8} checks  Redis {cpu / d:6.2f} µs/check  {reads:7} reads ({cpu / max(reads, 1):5.1f} µs each, {d / max(reads, 1):5.2f} checks each)  {writes:7} writes")
PY
}
open=(-mode open -rate "$rate" -dist uniform -keys "$keys" -duration "$dur")
closed=(-mode closed -workers 128 -dist zipf -keys "$keys" -duration "$dur")
measure node-new -addr $addr -driver single "${open[@]}" -prefix a-
redis-cli -p $rport config resetstat >/dev/null
measure node-warm -addr $addr -driver single "${open[@]}" -prefix a-
redis-cli -p $rport info commandstats | awk -F'[:=,]' '/^cmdstat_evalsha:/ {print "  node-warm: " $3 " script calls, " $7 " µs each inside Redis (usec_per_call)"}'
measure naive-new -driver naive -redis 127.0.0.1:$rport -limit 100 "${open[@]}" -prefix b-
measure node-zipf -addr $addr -driver single "${closed[@]}" -prefix c-
measure naive-zipf -driver naive -redis 127.0.0.1:$rport -limit 100 "${closed[@]}" -prefix d-
curl -s "http://$addr/metrics" | grep '^sluice_redis_first_touches_total' || true
