#!/bin/bash
# Steady state of the suite's redis-uniform-5k workload (token_bucket 100/s, 10k uniform keys,
# 5k checks/s, so each key is checked every 2 s): through a node on Redis, a 20 s warm pass,
# then 240 s measured (more than one 150 s loan life), then the naive counter (one INCRBY +
# EXPIRE per check) for 60 s at the same rate on the same redis-server. Redis CPU from its pid.
# usage: BENCH=/path/to/sluice-bench ./run.sh /path/to/sluiced OUT (ports 16399, 18099, 18946)
set -u
BIN=$1; OUT=$2; BENCH=${BENCH:-sluice-bench}; RULES=$(dirname "$0")/rules.yaml
MEASURE=${MEASURE:-240s}
redis-server --port 16399 --save "" --appendonly no --daemonize no > $OUT.redis.log 2>&1 &
RPID=$!
sleep 0.5  # redis-server has no readiness signal here; the node's start retries below
KEY=$(head -c32 /dev/urandom | base64)
$BIN -listen 127.0.0.1:18099 -rules "$RULES" -gossip 127.0.0.1:18946 -log-level warn -cluster-key "$KEY" -redis 127.0.0.1:16399 > $OUT.node.log 2>&1 &
NPID=$!
for i in $(seq 50); do curl -sf 127.0.0.1:18099/healthz >/dev/null && break; sleep 0.2; done
P=uni$RANDOM-
"$BENCH" run -addr 127.0.0.1:18099 -mode open -rate 5000 -dist uniform -keys 10000 -duration 20s -prefix $P -limit 100 -period 1s > $OUT.warm.txt 2>&1
"$BENCH" run -addr 127.0.0.1:18099 -mode open -rate 5000 -dist uniform -keys 10000 -duration $MEASURE -prefix $P -limit 100 -period 1s -redis 127.0.0.1:16399 -server-pid $RPID -json $OUT.json > $OUT.txt 2>&1
kill $NPID; wait $NPID
"$BENCH" run -driver naive -mode open -rate 5000 -dist uniform -keys 10000 -duration 60s -prefix $P -limit 100 -period 1s -redis 127.0.0.1:16399 -server-pid $RPID -json $OUT.naive.json > $OUT.naive.txt 2>&1
kill $RPID; wait $RPID
