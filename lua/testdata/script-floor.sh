#!/usr/bin/env bash
# What a script call costs inside Redis at its least: INFO commandstats'
# usec_per_call (the time Redis spends in the command, the way
# BenchmarkScriptCost reads the lease scripts') of an EVALSHA of
# "return 1", and of a script that reads TIME, GETs one key and SETs it
# with an expiry, beside a plain INCR. Starts a redis-server of its own on a
# free port; needs redis-server, redis-cli and redis-benchmark.
#   lua/testdata/script-floor.sh
set -euo pipefail
port=$((20000 + RANDOM % 20000))
redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
srv=$!
trap 'kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
usec() { # command... -> usec_per_call of its commandstats line
  redis-cli -p "$port" config resetstat >/dev/null
  redis-benchmark -p "$port" -n 200000 -c 8 -r 100000 -q "$@" >/dev/null
  redis-cli -p "$port" info commandstats | awk -F'[=,]' -v c="cmdstat_$(echo "$1" | tr A-Z a-z):" \
    'index($0, c) == 1 {print $6}'
}
one=$(redis-cli -p "$port" script load 'return 1')
getset=$(redis-cli -p "$port" script load "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], 'abcdefghijklmnopqrstuvwxyz0123', 'PX', 60000) return {1, 2, 3, 4, 5}")
echo "EVALSHA return 1:          $(usec evalsha "$one" 0) µs per call"
echo "EVALSHA TIME, GET, SET PX: $(usec evalsha "$getset" 1 'k:__rand_int__') µs per call"
echo "INCR:                      $(usec incr 'n:__rand_int__') µs per call"
