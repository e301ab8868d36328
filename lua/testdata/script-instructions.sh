#!/usr/bin/env bash
# Instructions per lease script call inside Redis, before/after, counted by
# valgrind (callgrind) rather than timed: on a shared machine the time per
# call swings with the others' load, the instruction count does not.
#   lua/testdata/script-instructions.sh OLD_REF
# Starts one redis-server under callgrind on a free port and, for each
# leased algorithm, the lease script as of OLD_REF (a git ref) and as in the
# work tree: 3000 calls over 500 keys, then counts 2000 more, in five
# cases: "spent", a holder renewing that reports tokens spent (which
# leaves its loan and ended loans in each key: 1000 an hour, so they
# still cap it); "shared", the same by two holders at once on the same
# keys (another holder's loan in the key: the general path); "renew", one
# holder on a key that refills at 100/s, after 2 s idle (the parts it
# reports spent cap nothing and go: its loan stays the key's only one, the
# steady state of a key one node checks); "held", a holder renewing that
# still holds its whole loan; "new", a first lease of a key without state
# (keys drawn from 10^8); "roll", a holder renewing its share ahead of
# 65536 windows of 1ms each (every call in a window its share covers and
# the key has not started: the key rolls into it, and the call renews the
# share; a version without shares ahead ignores those arguments and sees a
# new window each call); "sharedroll", the same by two holders at once on
# the same keys (the other holder's share in the key: the general path). Every case passes ahead_windows and ahead_tokens
# (0 0 but in "roll"), which only fixed_window reads. Then "return", the holder's return of a key it
# leased (1000 keys, each leased once, then returned once: the return
# script's instructions). Each version gets the holder argument its Store
# passes (OLD_REF may pass the Lessee ID itself, 34 bytes; this tree an
# 8-byte digest). Prints instructions per call; "return 1" is the floor of
# any script call with these arguments. Needs valgrind, redis-benchmark
# and redis-cli. ALGS="fixed_window ..." counts only those algorithms.
# SLUICE_TEST_REDIS=valkey counts on valkey-server (with valkey-cli and
# valkey-benchmark) instead.
set -euo pipefail
old=${1:?usage: script-instructions.sh OLD_REF}
cd "$(git rev-parse --show-toplevel)"
flavor=${SLUICE_TEST_REDIS:-redis}
case $flavor in redis | valkey) ;; *) echo "SLUICE_TEST_REDIS=$flavor: want redis or valkey" >&2; exit 2 ;; esac
server=$flavor-server cli=$flavor-cli benchmark=$flavor-benchmark
tmp=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$server" --port "$port" \
  --save '' --appendonly no >"$tmp/vg.log" 2>&1 &
vg=$!
trap 'kill "$vg" 2>/dev/null; wait "$vg" 2>/dev/null; rm -rf "$tmp"' EXIT
until "$cli" -p "$port" ping >/dev/null 2>&1; do sleep 1; done
ir() { # script-file holder case [holder2] -> instructions per call
  "$cli" -p "$port" script flush >/dev/null # a bigger Lua heap costs every call more GC
  local sha args args2='' keys=500
  sha=$("$cli" -p "$port" script load "$(cat "$1")")
  "$cli" -p "$port" flushall >/dev/null
  case $3 in # held, spent_before
  spent) args="1000 3600000000 1000 $2 10 1 3 300000000 0 7 12345 0 0 0" ;;
  shared) args="1000 3600000000 1000 $2 10 1 3 300000000 0 7 12345 0 0 0" args2=${args/$2/$4} ;;
  renew) args="100 1000000 100 $2 10 1 3 300000000 2000000 7 12345 0 0 0" ;;
  held) args="1000 3600000000 1000 $2 10 1 1000000 300000000 0 0 12345 0 0 0" ;;
  new) args="1000 3600000000 1000 $2 10 1 0 300000000 0 0 12345 0 0 0" keys=100000000 ;;
  roll) args="100 1000 100 $2 10 1 3 300000000 0 0 12345 0 0 65536 20" ;;
  sharedroll) args="100 1000 100 $2 10 1 3 300000000 0 0 12345 0 0 65536 20" args2=${args/$2/$4} ;;
  esac
  calls() { # n: n calls of the case (shared: n/2 of each holder at once)
    if [ -z "$args2" ]; then
      "$benchmark" -p "$port" -n "$1" -r "$keys" -c 4 -q evalsha "$sha" 1 '{k__rand_int__}:x' $args >/dev/null
      return
    fi
    "$benchmark" -p "$port" -n $(($1 / 2)) -r "$keys" -c 2 -q evalsha "$sha" 1 '{k__rand_int__}:x' $args >/dev/null &
    local other=$!
    "$benchmark" -p "$port" -n $(($1 / 2)) -r "$keys" -c 2 -q evalsha "$sha" 1 '{k__rand_int__}:x' $args2 >/dev/null
    wait "$other"
  }
  calls 3000
  callgrind_control -z "$vg" >/dev/null
  calls 2000
  rm -f "$tmp"/cg.out.*
  callgrind_control -d "$vg" >/dev/null
  awk '/^summary:|^totals:/ {print int($2 / 2000); exit}' "$(ls -t "$tmp"/cg.out.* | head -1)"
}
ret() { # lease-file return-file holder -> instructions per return call
  "$cli" -p "$port" script flush >/dev/null
  local ls rs i
  ls=$("$cli" -p "$port" script load "$(cat "$1")")
  rs=$("$cli" -p "$port" script load "$(cat "$2")")
  "$cli" -p "$port" flushall >/dev/null
  for i in $(seq 1000); do
    echo "evalsha $ls 1 {r$i}:x 1000 3600000000 1000 $3 10 1 0 300000000 0 0 12345 0 0 0"
  done | "$cli" -p "$port" >/dev/null
  callgrind_control -z "$vg" >/dev/null
  for i in $(seq 1000); do echo "evalsha $rs 1 {r$i}:x 1000 3600000000 1000 $3 5"; done | "$cli" -p "$port" >/dev/null
  rm -f "$tmp"/cg.out.*
  callgrind_control -d "$vg" >/dev/null
  awk '/^summary:|^totals:/ {print int($2 / 1000); exit}' "$(ls -t "$tmp"/cg.out.* | head -1)"
}
echo 'return 1' >"$tmp/r1.lua"
echo "return 1: $(ir "$tmp/r1.lua" x spent)"
for a in ${ALGS:-token_bucket gcra fixed_window sliding_window}; do
  for f in prelude leased "${a}_lease"; do git show "$old:lua/$f.lua"; done >"$tmp/old.lua"
  cat lua/prelude.lua lua/leased.lua "lua/${a}_lease.lua" >"$tmp/new.lua"
  oldholder=m-0123456789abcdef0123456789abcdef oldholder2=m-fedcba9876543210fedcba9876543210
  if git show "$old:lua/store.go" | grep -q holderOf; then oldholder=AbCdEfGh oldholder2=ZyXwVuTs; fi
  cases="spent shared renew held new"
  if [ "$a" = fixed_window ]; then cases="$cases roll sharedroll"; fi
  for c in $cases; do
    echo "$a, $c: $old $(ir "$tmp/old.lua" "$oldholder" $c "$oldholder2"), work tree $(ir "$tmp/new.lua" AbCdEfGh $c ZyXwVuTs)"
  done
  for f in prelude leased "${a}_return"; do git show "$old:lua/$f.lua"; done >"$tmp/oldr.lua"
  cat lua/prelude.lua lua/leased.lua "lua/${a}_return.lua" >"$tmp/newr.lua"
  echo "$a, return: $old $(ret "$tmp/old.lua" "$tmp/oldr.lua" "$oldholder"), work tree $(ret "$tmp/new.lua" "$tmp/newr.lua" AbCdEfGh)"
done
