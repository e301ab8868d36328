#!/usr/bin/env bash
# The node's user-space instructions per call in BenchmarkServerCPU, counted
# by valgrind (cachegrind) rather than timed: CPU time per call swings by a
# quarter with a shared machine's load, instruction counts by a few per cent.
#   node/rls/testdata/server-instructions.sh [OLD_REF]
# (CALLS="rls-lean rls" picks calls; N1, N2 the two counts of calls.)
# For each of the benchmark's calls (RLS on TransportLean and on grpc-go's
# transport, HTTP, the health Check on each, RLS on a node with GOGC=400)
# it runs the node process under valgrind for N1 and N2 calls and prints
# the difference per call, without the start-up. With OLD_REF (a git ref),
# the node package at that ref is measured too, driven by the work tree's
# benchmark (so a ref whose node/rls has TransportLean: the benchmark
# serves both transports). Under valgrind the node runs on one thread
# (GOMAXPROCS=1) and some 50 times slower: the lease path sees a new window
# on most calls (unit: second) and the transports batch their writes less,
# so compare counts with each other, not with timed figures.
# Needs valgrind (apt install valgrind).
set -euo pipefail
old=${1:-}
n1=${N1:-2000} n2=${N2:-10000}
cd "$(git rev-parse --show-toplevel)"
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/old" 2>/dev/null; rm -rf "$tmp"' EXIT
go test -c -tags vtprotobuf -o "$tmp/new.test" ./node/rls/
builds=new
if [ -n "$old" ]; then
  git worktree add -q --detach "$tmp/old" "$old"
  cp node/rls/bench_test.go "$tmp/old/node/rls/"
  (cd "$tmp/old" && go test -c -tags vtprotobuf -o "$tmp/old.test" ./node/rls/)
  builds="old new"
fi
ir() { # binary call n [env...] -> the node's instructions
  local bin=$1 call=$2 n=$3
  shift 3
  if ! env "$@" GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off \
    SLUICE_RLS_BENCH_SERVER_EXEC="valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null" \
    "$bin" -test.run '^$' -test.bench "ServerCPU/round1/$call\$" -test.benchtime "${n}x" >"$tmp/out" 2>&1; then
    tail -20 "$tmp/out" >&2
    exit 1
  fi
  awk '/I *refs:/ {gsub(",", "", $4); print $4}' "$tmp/out"
}
for spec in ${CALLS:-rls-lean rls http lean-health grpc-health rls:GOGC=400}; do
  call=${spec%%:*} env=()
  [ "$spec" = "$call" ] || env=("${spec#*:}")
  line="$spec:"
  for v in $builds; do
    a=$(ir "$tmp/$v.test" "$call" "$n1" "${env[@]}")
    b=$(ir "$tmp/$v.test" "$call" "$n2" "${env[@]}")
    line="$line $v $(((b - a) / (n2 - n1))),"
  done
  echo "${line%,} instructions/call"
done
