#!/usr/bin/env bash
# Interleaved A/B throughput of sluiced's single check against the bare
# fasthttp ceiling (node/testdata/ceiling), same wrk settings, in one run;
# then /v1/checks with batches of 100. Prints each run's Requests/sec and
# the server's CPU time per request (user+system from /proc, which other
# load on a shared machine disturbs far less than throughput), and the
# medians. Usage (from the repo root):
#   node/testdata/ab.sh [rounds=3] [seconds=10] [connections=32]
set -euo pipefail
rounds=${1:-3} secs=${2:-10} conns=${3:-32}
tmp=$(mktemp -d)
go build -o "$tmp/sluiced" ./cmd/sluiced
go build -o "$tmp/ceiling" ./node/testdata/ceiling
A=127.0.0.1:18380 C=127.0.0.1:18381
# A cluster of one (-gossip, as a clustered node decides): it needs a key.
SLUICE_CLUSTER_KEY=$(head -c 32 /dev/urandom | base64) \
  "$tmp/sluiced" -listen $A -gossip 127.0.0.1:17380 -rules node/testdata/bench-rules.yaml -log-level warn >"$tmp/sluiced.log" 2>&1 &
spid=$!
trap 'kill $spid ${cpid:-} 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do curl -sf -o /dev/null http://$A/healthz && break; sleep 0.1; done
"$tmp/ceiling" -listen $C -from http://$A/v1/check >"$tmp/ceiling.log" 2>&1 &
cpid=$!
for _ in $(seq 50); do curl -s -o /dev/null -X POST http://$C/v1/check && break; sleep 0.1; done
head -1 "$tmp/ceiling.log"
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# rps URL SCRIPT PID: prints "req/s cpu-µs/req".
rps() {
  local t0 out t1
  t0=$(ticks "$3")
  out=$(wrk -t1 -c"$conns" -d"${secs}s" -s "$2" "$1")
  t1=$(ticks "$3")
  echo "$out" | awk -v dt=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v s="$secs" '
    /Requests\/sec/ {r = $2}
    END {printf "%s %.2f\n", r, dt / hz * 1e6 / (r * s)}'
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
: >"$tmp/a"; : >"$tmp/c"; : >"$tmp/b"
for r in $(seq "$rounds"); do
  read -r a au < <(rps http://$A/v1/check node/testdata/post.lua $spid); echo "$a $au" >>"$tmp/a"
  read -r c cu < <(rps http://$C/v1/check node/testdata/post.lua $cpid); echo "$c $cu" >>"$tmp/c"
  echo "round $r: sluiced $a req/s ($au cpu-µs/req), ceiling $c req/s ($cu cpu-µs/req)"
done
for r in $(seq "$rounds"); do
  read -r b bu < <(rps http://$A/v1/checks node/testdata/batch100.lua $spid); echo "$b $bu" >>"$tmp/b"
  echo "batch round $r: $b req/s = $(awk -v b="$b" 'BEGIN {printf "%.0f", b*100}') decisions/s ($bu cpu-µs/req)"
done
col() { awk -v c="$1" '{print $c}' "$2" | median; }
ma=$(col 1 "$tmp/a") mc=$(col 1 "$tmp/c") mb=$(col 1 "$tmp/b")
ua=$(col 2 "$tmp/a") uc=$(col 2 "$tmp/c") ub=$(col 2 "$tmp/b")
echo "median: sluiced $ma req/s, ceiling $mc req/s, ratio $(awk -v a="$ma" -v c="$mc" 'BEGIN {printf "%.1f%%", 100*a/c}')"
echo "median server CPU: sluiced $ua µs/req, ceiling $uc µs/req, ratio ceiling/sluiced $(awk -v a="$ua" -v c="$uc" 'BEGIN {printf "%.1f%%", 100*c/a}')"
echo "median batch100: $mb req/s = $(awk -v b="$mb" 'BEGIN {printf "%.0f", b*100}') decisions/s, $ub cpu-µs/req"
