#!/usr/bin/env bash
# Instructions per token_bucket lease call inside Redis on a key N holders
# lease, counted by valgrind (callgrind) rather than timed (see
# script-instructions.sh): what BenchmarkLeaseHolders measures in time, on
# a shared machine whose load swings the time per call and not the count.
#   lua/testdata/holders-instructions.sh [N...]   (default: 1 16 32 64 128)
# Starts one redis-server under callgrind; for each N, N holders lease one
# token each of one key (100,000/s, so that none runs short), then each
# renews in turn, reporting its token spent (held 0) and asking for one
# more, as BenchmarkLeaseHolders does: 1000 calls, then 2000 counted
# (whole rounds). Prints
# instructions per call, and the ratio to N=1. ALG=gcra counts gcra's;
# KEEP=FILE keeps the last count's callgrind output there.
# Needs valgrind, redis-cli.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
alg=${ALG:-token_bucket}
tmp=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" redis-server --port "$port" \
  --save '' --appendonly no >"$tmp/vg.log" 2>&1 &
vg=$!
trap 'kill "$vg" 2>/dev/null; wait "$vg" 2>/dev/null; [ -n "${KEEP:-}" ] && cp "$(ls -t "$tmp"/cg.out.* | head -1)" "$KEEP"; rm -rf "$tmp"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 1; done
cat lua/prelude.lua lua/leased.lua "lua/${alg}_lease.lua" >"$tmp/lease.lua"
sha=$(redis-cli -p "$port" script load "$(cat "$tmp/lease.lua")")
calls() { # n rounds: each of the n holders' calls on key k$n
  local n=$1 rounds=$2 r i
  for r in $(seq "$rounds"); do
    for i in $(seq "$n"); do
      printf 'evalsha %s 1 {k%d}:x 100000 1000000 100000 h%07d 1 1 0 300000000 0 0 %d 0 0\n' "$sha" "$n" "$i" $((r * 100000 + i))
    done
  done | redis-cli -p "$port" >/dev/null
}
base=
for n in ${*:-1 16 32 64 128}; do
  rounds=$(((2000 + n - 1) / n))
  calls "$n" $((rounds / 2))
  callgrind_control -z "$vg" >/dev/null 2>&1
  calls "$n" "$rounds"
  rm -f "$tmp"/cg.out.*
  callgrind_control -d "$vg" >/dev/null 2>&1
  per=$(awk -v c=$((rounds * n)) '/^summary:|^totals:/ {print int($2 / c); exit}' "$(ls -t "$tmp"/cg.out.* | head -1)")
  base=${base:-$per}
  echo "$alg holders=$n: $per instructions per call, $(awk -v a="$per" -v b="$base" 'BEGIN {printf "%.2f", a / b}')x holders=1"
done
