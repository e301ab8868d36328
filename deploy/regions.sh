#!/usr/bin/env bash
# A global tier and three regions on this machine (docs/regions.md): one
# sluiced for the global tier, three regional sluiced (eu, us, ap, each its
# own cluster with its own in-memory Store) that lease the keys of global
# rules from it, each through a delay proxy adding an 80 ms round trip.
#
#   deploy/regions.sh [SECONDS]   make build, start everything, check each region, then keep it
#                                 running for SECONDS (default 300; 0: stop at once)
#
# Everything stops, and its state directory (rules, logs) is removed, when
# the script exits (the time is up, Ctrl-C, or an error: a node that does
# not get ready has its log's tail printed first). Ports, on 127.0.0.1 only: the global tier on $BASE, the proxies on
# $BASE+1..3, the regions on $BASE+11..13. Environment:
#   SLUICE_REGIONS_BASE   first port (default 9190)
#   SLUICE_REGIONS_DELAY  one-way delay of each region's link (default 40ms)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
base=${SLUICE_REGIONS_BASE:-9190}
delay=${SLUICE_REGIONS_DELAY:-40ms}
secs=${1:-300}
[[ "$secs" =~ ^[0-9]+$ ]] || { echo "regions: SECONDS must be a whole number" >&2; exit 2; }
regions=(eu us ap)
state=$(mktemp -d "${TMPDIR:-/tmp}/sluice-regions.XXXXXX")
token=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
pids=()

say() { echo "regions: $*"; }

stop() {
	local pid
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$state"
	say "stopped"
}
trap stop EXIT
trap 'exit 130' INT TERM

# wait_ready PORT NAME: /readyz of 127.0.0.1:PORT answers 200 within 20 s.
wait_ready() {
	local i
	for ((i = 0; i < 100; i++)); do
		[ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$1/readyz" || true)" = 200 ] && return 0
		sleep 0.2
	done
	say "$2 (127.0.0.1:$1) not ready after 20 s; its log:"
	tail -n 20 "$state/$2.log" >&2
	exit 1
}

# sluiced as make build makes it (with its build tags): the script uses
# .bin/sluiced, never replaces it with a build of its own.
say "building .bin/sluiced (make build) and .bin/delayproxy"
make -C "$root" --no-print-directory build >/dev/null
(cd "$root" && go build -o .bin/delayproxy ./deploy/delayproxy)

cat >"$state/rules-global.yaml" <<'EOF'
rules:
  - name: tenant
    algorithm: token_bucket
    limit: 100
    period: 1m
    descriptor: tenant
    scope: global
    regional_floor: 0.05
EOF
{
	cat "$state/rules-global.yaml"
	cat <<'EOF'
  - name: per-ip
    algorithm: token_bucket
    limit: 5
    period: 1m
    descriptor: ip
EOF
} >"$state/rules-region.yaml"

SLUICE_CLIENT_TOKEN=$token "$root/.bin/sluiced" -listen "127.0.0.1:$base" -node-name global \
	-rules "$state/rules-global.yaml" >"$state/global.log" 2>&1 &
pids+=($!)
wait_ready "$base" global
say "global tier on 127.0.0.1:$base"

for i in 0 1 2; do
	r=${regions[$i]}
	pport=$((base + 1 + i))
	rport=$((base + 11 + i))
	"$root/.bin/delayproxy" -listen "127.0.0.1:$pport" -target "127.0.0.1:$base" -delay "$delay" >"$state/proxy-$r.log" 2>&1 &
	pids+=($!)
	SLUICE_UPSTREAM_TOKEN=$token "$root/.bin/sluiced" -listen "127.0.0.1:$rport" -node-name "$r-1" -region "$r" \
		-upstream "http://127.0.0.1:$pport" -rules "$state/rules-region.yaml" >"$state/$r.log" 2>&1 &
	pids+=($!)
done
for i in 0 1 2; do
	wait_ready $((base + 11 + i)) "${regions[$i]}"
done

for i in 0 1 2; do
	r=${regions[$i]}
	rport=$((base + 11 + i))
	rtt=$(curl -s -m 2 "http://127.0.0.1:$rport/metrics" | awk '/^sluice_upstream_rtt_seconds /{print $2}')
	codes=""
	for _ in 1 2 3; do
		codes+=" $(curl -s -o /dev/null -m 5 -w '%{http_code}' -X POST "http://127.0.0.1:$rport/v1/check" \
			-H 'Content-Type: application/json' -d '{"rule":"tenant","key":"acme"}')"
	done
	say "$r on 127.0.0.1:$rport: upstream rtt ${rtt}s; 3 checks of tenant/acme:$codes"
done
curl -s -m 2 -X POST "http://127.0.0.1:$base/v1/check" -H 'Content-Type: application/json' \
	-d '{"rule":"tenant","key":"acme","hits":0}' | sed 's/^/regions: global tier, tenant\/acme: /'
echo
say "try: curl -s -XPOST 127.0.0.1:$((base + 11))/v1/check -d '{\"rule\":\"tenant\",\"key\":\"acme\"}'"
say "running for $secs s (Ctrl-C stops everything)"
sleep "$secs"
