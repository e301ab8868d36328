#!/usr/bin/env bash
# Instructions per lease script call inside Redis, before/after, counted by
# valgrind (callgrind) rather than timed: on a shared machine the time per
# call swings with the others' load, the instruction count does not.
#   lua/testdata/script-instructions.sh OLD_REF
# Starts one redis-server under callgrind on a free port and, for each
# leased algorithm, the lease script as of OLD_REF (a git ref) and as in the
# work tree: 3000 calls over 500 keys, then counts 2000 more, in three
# cases: "spent", a holder renewing that reports tokens spent (which
# leaves its loan and ended loans in each key); "held", a holder renewing
# that still holds its whole loan; "new", a first lease of a key without
# state (keys drawn from 10^8). Each version gets the holder argument its
# Store passes (OLD_REF may pass the Lessee ID itself, 34 bytes; this tree
# an 8-byte digest). Prints instructions per call; "return 1" is the floor
# of any script call with these arguments. Needs valgrind and
# redis-benchmark.
set -euo pipefail
old=${1:?usage: script-instructions.sh OLD_REF}
cd "$(git rev-parse --show-toplevel)"
tmp=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" redis-server --port "$port" \
  --save '' --appendonly no >"$tmp/vg.log" 2>&1 &
vg=$!
trap 'kill "$vg" 2>/dev/null; wait "$vg" 2>/dev/null; rm -rf "$tmp"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 1; done
ir() { # script-file holder [case] -> instructions per call
  redis-cli -p "$port" script flush >/dev/null # a bigger Lua heap costs every call more GC
  local sha args keys=500
  sha=$(redis-cli -p "$port" script load "$(cat "$1")")
  redis-cli -p "$port" flushall >/dev/null
  case ${3:-spent} in # held, spent_before
  spent) args="1000 3600000000 1000 $2 10 1 3 300000000 0 7 12345 0" ;;
  held) args="1000 3600000000 1000 $2 10 1 1000000 300000000 0 0 12345 0" ;;
  new) args="1000 3600000000 1000 $2 10 1 0 300000000 0 0 12345 0" keys=100000000 ;;
  esac
  redis-benchmark -p "$port" -n 3000 -r "$keys" -c 4 -q evalsha "$sha" 1 '{k__rand_int__}:x' $args >/dev/null
  callgrind_control -z "$vg" >/dev/null
  redis-benchmark -p "$port" -n 2000 -r "$keys" -c 4 -q evalsha "$sha" 1 '{k__rand_int__}:x' $args >/dev/null
  rm -f "$tmp"/cg.out.*
  callgrind_control -d "$vg" >/dev/null
  awk '/^summary:|^totals:/ {print int($2 / 2000); exit}' "$(ls -t "$tmp"/cg.out.* | head -1)"
}
echo 'return 1' >"$tmp/r1.lua"
echo "return 1: $(ir "$tmp/r1.lua" x)"
for a in token_bucket gcra fixed_window sliding_window; do
  for f in prelude leased "${a}_lease"; do git show "$old:lua/$f.lua"; done >"$tmp/old.lua"
  cat lua/prelude.lua lua/leased.lua "lua/${a}_lease.lua" >"$tmp/new.lua"
  oldholder=m-0123456789abcdef0123456789abcdef
  if git show "$old:lua/store.go" | grep -q holderOf; then oldholder=AbCdEfGh; fi
  for c in spent held new; do
    echo "$a, $c: $old $(ir "$tmp/old.lua" "$oldholder" $c), work tree $(ir "$tmp/new.lua" AbCdEfGh $c)"
  done
done
