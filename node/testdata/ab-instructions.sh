#!/usr/bin/env bash
# Before/after A/B in instructions, not time: on a shared machine CPU time
# per request swings by ±10% with the others' load, instruction counts do
# not (within ~1%: the lease path reads the clock).
#   node/testdata/ab-instructions.sh OLD_REF [daemon]
# builds the node and lease packages' test binaries at OLD_REF (a git ref)
# and at the work tree and prints, for each in-process benchmark below that
# both have, instructions per op under valgrind (callgrind, one goroutine:
# the count of -benchtime N2x minus N1x, divided by N2 - N1); TakeHot/single
# is lease.Manager.Take on a leased key (its fast path). With "daemon",
# also each sluiced's user-space instructions per request under wrk
# (cachegrind; memory store; node/testdata/batch100.lua and post.lua), the
# whole process: fasthttp, JSON, engine, runtime.
# Needs valgrind (apt install valgrind) and, for daemon, wrk.
set -euo pipefail
old=${1:?usage: ab-instructions.sh OLD_REF [daemon]}
cd "$(git rev-parse --show-toplevel)"
tmp=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; git worktree remove --force "$tmp/old" 2>/dev/null; rm -rf "$tmp"' EXIT
git worktree add -q --detach "$tmp/old" "$old"
(cd "$tmp/old" && go test -c -o "$tmp/old.test" ./node/ && go test -c -o "$tmp/old-lease.test" ./lease/ &&
  go build -o "$tmp/old-sluiced" ./cmd/sluiced)
go test -c -o "$tmp/new.test" ./node/
go test -c -o "$tmp/new-lease.test" ./lease/
go build -o "$tmp/new-sluiced" ./cmd/sluiced
# callgrind loses track of Go's preemption signals, and does not know
# RDTSCP, which Go's runtime runs when a lock is contended (a SIGILL): off.
export GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off
# ir: a run valgrind stopped runs again.
ir() { # test-binary bench n -> instructions
  local try
  for try in 1 2 3 4 5 6 7 8; do
    if GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$1" -test.run '^$' \
      -test.bench "$2" -test.benchtime "${3}x" >"$tmp/ir.out" 2>&1; then
      awk '/Collected/ {print $4}' "$tmp/ir.out"
      return
    fi
    echo "ab-instructions: $1 $2 ${3}x failed (try $try): $(grep -m1 -e 'SIG' -e 'panic' -e 'FAIL' "$tmp/ir.out")" >&2
  done
  return 1
}
for spec in 'CheckHandler$ 20000 60000' 'ChecksBatch100$ 1000 3000' 'ServerBatch100$ 1000 3000' 'DecideBatch100$ 1000 3000' \
  'lease TakeHot/single$ 200000 600000'; do
  pkg=
  [[ $spec == lease\ * ]] && pkg=-lease spec=${spec#lease }
  read -r bench n1 n2 <<<"$spec"
  line="${bench%\$}:"
  for v in old new; do
    if ! "$tmp/$v$pkg.test" -test.list "Benchmark${bench%%/*}" | grep -q .; then
      line="$line $v -,"
      continue
    fi
    a=$(ir "$tmp/$v$pkg.test" "$bench" "$n1") b=$(ir "$tmp/$v$pkg.test" "$bench" "$n2")
    line="$line $v $(((b - a) / (n2 - n1))),"
  done
  echo "${line%,} instructions/op"
done
[ "${2:-}" = daemon ] || exit 0
daemon() { # name port secs script path -> "requests instructions"
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$tmp/$1-$2.cg" "$tmp/$1-sluiced" \
    -listen 127.0.0.1:$2 -rules node/testdata/bench-rules.yaml -log-level warn >"$tmp/$1-$2.log" 2>&1 &
  local p=$!
  pids+=($p)
  for _ in $(seq 300); do curl -sf -o /dev/null http://127.0.0.1:$2/healthz && break; sleep 0.2; done
  wrk -t1 -c8 -d"${3}s" -s "node/testdata/$4" "http://127.0.0.1:$2$5" >/dev/null
  local n
  n=$(curl -s http://127.0.0.1:$2/metrics | awk -v p="$5" '$0 ~ "^sluice_http_requests_total\\{path=\""p"\"" {s += $2} END {print s + 0}')
  kill -INT $p
  wait $p 2>/dev/null || true
  echo "$n $(awk '/^summary:/ {print $2}' "$tmp/$1-$2.cg")"
}
# Two runs of each (4 s and 14 s of load): the difference is per request,
# without the start-up.
for kind in batch100.lua:/v1/checks post.lua:/v1/check; do
  script=${kind%%:*} path=${kind##*:}
  line="sluiced $path ($script):"
  for v in old:18490 new:18491; do
    name=${v%%:*} port=${v##*:}
    read -r r1 i1 < <(daemon "$name" "$port" 4 "$script" "$path")
    read -r r2 i2 < <(daemon "$name" "$port" 14 "$script" "$path")
    line="$line $name $(((i2 - i1) / (r2 - r1))) ($((r2 - r1)) requests),"
  done
  echo "${line%,} instructions/request"
done
