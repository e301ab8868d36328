#!/bin/bash
# Steady state of the suite's redis-idle-return workload: 15k keys in a 15 s cycle at 1k/s,
# through a node on Redis, one warm cycle then 300 s measured (two half-TTL loan lives).
# usage: BENCH=/path/to/sluice-bench ./run.sh /path/to/sluiced OUT (ports 16399, 18099, 18946)
set -u
BIN=$1; OUT=$2; BENCH=${BENCH:-sluice-bench}; RULES=$(dirname "$0")/rules.yaml
redis-server --port 16399 --save "" --appendonly no --daemonize no > $OUT.redis.log 2>&1 &
RPID=$!
sleep 0.5  # redis-server has no readiness signal here; the node's start retries below
KEY=$(head -c32 /dev/urandom | base64)
$BIN -listen 127.0.0.1:18099 -rules "$RULES" -gossip 127.0.0.1:18946 -log-level warn -cluster-key "$KEY" -redis 127.0.0.1:16399 > $OUT.node.log 2>&1 &
NPID=$!
for i in $(seq 50); do curl -sf 127.0.0.1:18099/healthz >/dev/null && break; sleep 0.2; done
P=idle$RANDOM-
"$BENCH" run -addr 127.0.0.1:18099 -mode open -rate 1000 -dist cycle -keys 15000 -duration 15s -prefix $P -limit 100 -period 1s > $OUT.warm.txt 2>&1
"$BENCH" run -addr 127.0.0.1:18099 -mode open -rate 1000 -dist cycle -keys 15000 -duration 300s -prefix $P -limit 100 -period 1s -redis 127.0.0.1:16399 -server-pid $RPID -json $OUT.json > $OUT.txt 2>&1
kill $NPID; wait $NPID
kill $RPID; wait $RPID
