#!/usr/bin/env bash
# What a script call costs inside Redis at its least: INFO commandstats'
# usec_per_call (the time Redis spends in the command, the way
# BenchmarkScriptCost reads the lease scripts') of an EVALSHA of
# "return 1", of a script that reads TIME, GETs one key and SETs it with an
# expiry, and of a plain INCR. Each twice: busy (redis-benchmark, 8
# connections: Redis's caches stay warm), then paced (one call at a time,
# 265 a second, by a Python client: the rate of the suite's warm phases,
# where Redis waits for work between calls). Starts a redis-server of its
# own on a free port; needs redis-server, redis-cli, redis-benchmark and
# python3.
#   lua/testdata/script-floor.sh
set -euo pipefail
port=$((20000 + RANDOM % 20000))
redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
srv=$!
trap 'kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
per_call() { # command name -> usec_per_call of its commandstats line
  redis-cli -p "$port" info commandstats | awk -F'[=,]' -v c="cmdstat_$1:" 'index($0, c) == 1 {print $6}'
}
busy() { # command... (__rand_int__ in a key: one of 100,000)
  redis-cli -p "$port" config resetstat >/dev/null
  redis-benchmark -p "$port" -n 200000 -c 8 -r 100000 -q "$@" >/dev/null
  per_call "$(echo "$1" | tr A-Z a-z)"
}
paced() { # command... ({i} in a key: one of 100,000): 1,500 calls at 265 a second
  redis-cli -p "$port" config resetstat >/dev/null
  python3 - "$port" "$@" <<'PY'
import random, socket, sys, time
port, args = int(sys.argv[1]), sys.argv[2:]
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")
def reply():  # reads one RESP reply
    line = f.readline()
    if line[:1] == b"$" and int(line[1:]) >= 0:
        f.read(int(line[1:]) + 2)
    elif line[:1] == b"*":
        for _ in range(int(line[1:])):
            reply()
due = time.monotonic()
for _ in range(1500):
    a = [x.replace("{i}", str(random.randrange(100000))).encode() for x in args]
    s.sendall(b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in a))
    reply()
    due += 1 / 265
    time.sleep(max(0, due - time.monotonic()))
PY
  per_call "$(echo "$1" | tr A-Z a-z)"
}
one=$(redis-cli -p "$port" script load 'return 1')
getset=$(redis-cli -p "$port" script load "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], 'abcdefghijklmnopqrstuvwxyz0123', 'PX', 60000) return {1, 2, 3, 4, 5}")
echo "µs per call inside Redis: busy, paced"
echo "EVALSHA return 1:          $(busy evalsha "$one" 0), $(paced evalsha "$one" 0)"
echo "EVALSHA TIME, GET, SET PX: $(busy evalsha "$getset" 1 'k:__rand_int__'), $(paced evalsha "$getset" 1 'k:{i}')"
echo "INCR:                      $(busy incr 'n:__rand_int__'), $(paced incr 'n:{i}')"
