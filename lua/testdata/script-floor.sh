#!/usr/bin/env bash
# What a script call costs inside Redis at its least: INFO commandstats'
# usec_per_call (the time Redis spends in the command, the way
# BenchmarkScriptCost reads the lease scripts') of an EVALSHA of
# "return 1", of a script that reads TIME, GETs one key and SETs it with an
# expiry, and of a plain INCR. Each twice: busy (redis-benchmark, 8
# connections: Redis's caches stay warm), then paced (one call at a time,
# 265 a second, by a Python client: the rate of the suite's warm phases,
# where Redis waits for work between calls), and paced five to a write (53
# writes a second: the same calls in fewer round trips), with Redis's CPU
# per call (INFO's used_cpu_user + used_cpu_sys: the command and the round
# trip) beside the paced ones. The last row is this tree's token_bucket
# lease script: a holder renewing its loan on a key that refills at 100/s
# (lua/testdata/script-instructions.sh's "renew", on 100,000 keys; the
# busy run leases most of them first, so the paced calls mostly renew). Starts
# a redis-server of its own on a free port; needs redis-server, redis-cli,
# redis-benchmark and python3. SLUICE_TEST_REDIS=valkey runs valkey-server
# (and valkey-cli, valkey-benchmark) instead, as the Go tests do.
#   lua/testdata/script-floor.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
flavor=${SLUICE_TEST_REDIS:-redis}
case $flavor in redis | valkey) ;; *) echo "SLUICE_TEST_REDIS=$flavor: want redis or valkey" >&2; exit 2 ;; esac
server=$flavor-server cli=$flavor-cli benchmark=$flavor-benchmark
port=$((20000 + RANDOM % 20000))
"$server" --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
srv=$!
trap 'kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null' EXIT
until "$cli" -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
per_call() { # command -> usec_per_call of its commandstats line
  "$cli" -p "$port" info commandstats |
    awk -F'[=,]' -v c="cmdstat_$(echo "$1" | tr A-Z a-z):" 'index($0, c) == 1 {print $6}'
}
busy() { # command... (__rand_int__ in a key: one of 100,000)
  "$cli" -p "$port" config resetstat >/dev/null
  "$benchmark" -p "$port" -n 200000 -c 8 -r 100000 -q "$@" >/dev/null
  per_call "$1"
}
cpu() { "$cli" -p "$port" info cpu | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'; }
paced() { # per-write command... (__rand_int__ as redis-benchmark writes it): 1,500 calls at 265 a second, per-write to a write
  local per=$1 c0 c1
  shift
  "$cli" -p "$port" config resetstat >/dev/null
  c0=$(cpu)
  python3 - "$port" "$per" "$@" <<'PY'
import random, socket, sys, time
port, per, args = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")
def reply():  # reads one RESP reply
    line = f.readline()
    if line[:1] == b"$" and int(line[1:]) >= 0:
        f.read(int(line[1:]) + 2)
    elif line[:1] == b"*":
        for _ in range(int(line[1:])):
            reply()
def command():
    n = "%012d" % random.randrange(100000)  # the busy run's keys
    a = [x.replace("__rand_int__", n).encode() for x in args]
    return b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in a)
due = time.monotonic()
for _ in range(1500 // per):
    s.sendall(b"".join(command() for _ in range(per)))
    for _ in range(per):
        reply()
    due += per / 265
    time.sleep(max(0, due - time.monotonic()))
PY
  c1=$(cpu)
  printf '%s (%s)' "$(per_call "$1")" "$(awk -v a="$c0" -v b="$c1" -v n=$((1500 / per * per)) 'BEGIN {printf "%.1f", (b - a) * 1e6 / n}')"
}
row() { # label command-words
  local label=$1 c=$2
  # shellcheck disable=SC2086 # the arguments are words
  echo "$label $(busy $c), $(paced 1 $c), $(paced 5 $c)"
}
one=$("$cli" -p "$port" script load 'return 1')
getset=$("$cli" -p "$port" script load "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], 'abcdefghijklmnopqrstuvwxyz0123', 'PX', 60000) return {1, 2, 3, 4, 5}")
tb=$(cat lua/prelude.lua lua/leased.lua lua/token_bucket_lease.lua)
tb=$("$cli" -p "$port" script load "$tb")
renew="100 1000000 100 AbCdEfGh 10 1 3 300000000 2000000 7 12345 0 0 0"
echo "µs per call inside Redis (usec_per_call): busy; paced (Redis CPU per call); paced, five to a write (Redis CPU per call)"
row "EVALSHA return 1:           " "evalsha $one 0"
row "EVALSHA TIME, GET, SET PX:  " "evalsha $getset 1 k:__rand_int__"
row "INCR:                       " "incr n:__rand_int__"
row "token_bucket lease, renew:  " "evalsha $tb 1 {u__rand_int__}:x $renew"
