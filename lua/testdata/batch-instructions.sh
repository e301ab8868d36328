#!/usr/bin/env bash
# Instructions per lease call inside Redis, alone and in batch script calls
# (see lua/batch.go), counted by valgrind (callgrind) rather than timed.
#   lua/testdata/batch-instructions.sh
# Writes the token_bucket lease script and the batch script (go test -run
# TestWriteBatchScript), starts one redis-server under callgrind on a free
# port and, for each way, makes 500 keys hold a loan of one holder (4000
# calls), then counts 4000 more calls: alone, and in batches of 8 and 64
# (the same arguments per call; the batch script runs the same lease script
# for each). Prints instructions per lease call. Needs valgrind and
# redis-benchmark.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
tmp=$(mktemp -d)
SLUICE_BATCH_SCRIPTS="$tmp" go test -count=1 -run '^TestWriteBatchScript$' ./lua/ >/dev/null
port=$((20000 + RANDOM % 20000))
valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" redis-server --port "$port" \
  --save '' --appendonly no >"$tmp/vg.log" 2>&1 &
vg=$!
trap 'kill "$vg" 2>/dev/null; wait "$vg" 2>/dev/null; rm -rf "$tmp"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 1; done
args="1000 3600000000 1000 AbCdEfGh 10 1 3 300000000 0 7 12345 0 0"
ir() { # script keys-per-call (0: alone) -> instructions per lease call
  redis-cli -p "$port" script flush >/dev/null
  local sha n=$2 cmd
  sha=$(redis-cli -p "$port" -x script load <"$1")
  redis-cli -p "$port" flushall >/dev/null
  if [ "$n" = 0 ]; then
    n=1
    cmd="1 {k__rand_int__}:x $args"
  else
    local keys="" a=""
    # 2: the token_bucket lease script's index in the batch script; 12 arguments.
    for _ in $(seq "$n"); do keys="$keys {k__rand_int__}:x"; a="$a 2 12 $args"; done
    cmd="$n $keys $a"
  fi
  local calls=$((4000 / n))
  redis-benchmark -p "$port" -n "$calls" -r 500 -c 4 -q evalsha "$sha" $cmd >/dev/null
  callgrind_control -z "$vg" >/dev/null
  redis-benchmark -p "$port" -n "$calls" -r 500 -c 4 -q evalsha "$sha" $cmd >/dev/null
  rm -f "$tmp"/cg.out.*
  callgrind_control -d "$vg" >/dev/null
  awk -v d=$((calls * n)) '/^summary:|^totals:/ {print int($2 / d); exit}' "$(ls -t "$tmp"/cg.out.* | head -1)"
}
echo "alone: $(ir "$tmp/single.lua" 0)"
echo "batches of 8: $(ir "$tmp/batch.lua" 8)"
echo "batches of 64: $(ir "$tmp/batch.lua" 64)"
