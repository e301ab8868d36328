#!/usr/bin/env bash
# The standard benchmark suite, what `make bench` runs: builds sluiced and
# sluice-bench, then `sluice-bench suite` starts what it needs (redis-server,
# nodes on the memory store and on Redis, the ceiling server) on loopback,
# runs every phase (each bounded), stops everything and writes
# bench/results/<UTC date>/{report.md,run.json,*.svg}.
# Extra arguments go to `sluice-bench suite` (e.g. -phase 2s for a quick look).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/sluice-bench" ./cmd/sluice-bench
sluiced=""
if go build -o "$bin/sluiced" ./cmd/sluiced; then
	sluiced="$bin/sluiced"
else
	echo "run-suite: cmd/sluiced does not build; node phases will be skipped" >&2
fi
"$bin/sluice-bench" suite -sluiced "$sluiced" "$@"
