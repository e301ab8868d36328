#!/usr/bin/env bash
# Caddy with the sluice directive (contrib/caddy: a client.Limiter deciding
# in Caddy) against the same Caddy without it, and against the same Caddy
# with the forward_auth recipe of deploy/gateways/Caddyfile (one
# GET /v1/auth to the node per request), driven by wrk, in one run, on a
# node on the memory store and one on Redis.
#
#   leased   one key (X-API-Key: hot) whose tokens the Limiter holds:
#            sluice vs the same Caddy without it (target >= 90%)
#   cold     Zipf(ZIPF_S) over KEYS keys, a fresh prefix per run
#            (zipf-key.lua): sluice vs forward_auth (target >= 1x)
#
# Every Caddy is the same binary (caddy-sluice, make caddy) and answers
# with `respond` (no backend). The rule admits every request (a limit no
# run reaches): what is measured is the cost of deciding. Rounds alternate
# the configurations (ABBA); the table gives each one's median requests/s,
# the ratio of the medians, and the median CPU per request of the Caddy
# and of the node (from /proc; steadier than requests/s on a shared
# machine). Everything started listens on loopback and is stopped on exit.
#
# Usage (from the repository's root):
#   bench/testdata/caddy-gateway.sh
# Environment: SLUICED, CADDY (binaries; built when unset), STORES
# ("memory redis"), ROUNDS (3), DURATION (wrk -d, 10s), CONNS (wrk -c, 64),
# THREADS (wrk -t, 1), KEYS (1000000), ZIPF_S (1.1).
set -euo pipefail
cd "$(dirname "$0")/../.."
for bin in wrk redis-server; do
	command -v "$bin" >/dev/null || { echo "caddy-gateway: $bin is required" >&2; exit 1; }
done
STORES=${STORES:-memory redis}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-1}
export KEYS=${KEYS:-1000000} ZIPF_S=${ZIPF_S:-1.1}
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
if [ -z "${SLUICED:-}" ]; then
	go build -o "$tmp/sluiced" ./cmd/sluiced
	SLUICED=$tmp/sluiced
fi
if [ -z "${CADDY:-}" ]; then
	(cd contrib/caddy && go build -o "$tmp/caddy-sluice" ./cmd/caddy)
	CADDY=$tmp/caddy-sluice
fi
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
waitport() { # waits for 127.0.0.1:$1 to accept (at most 15s)
	for _ in $(seq 150); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "caddy-gateway: nothing listens on 127.0.0.1:$1" >&2
	return 1
}

cat >"$tmp/rules.yaml" <<EOF
rules:
  - name: big
    algorithm: token_bucket
    limit: 1000000000000
    period: 1s
    key: header:X-API-Key
EOF

# caddyfile NAME PORT NODE: a Caddyfile answering on PORT, with NAME's
# directive in front of `respond`.
caddyfile() {
	local name=$1 port=$2 node=$3 mw=""
	case $name in
	sluice) mw="sluice {
		nodes http://$node
		token {env.SLUICE_CLIENT_TOKEN}
		rule big
		key {http.request.header.X-API-Key}
	}" ;;
	forward_auth) mw="forward_auth $node {
		uri /v1/auth
		copy_headers RateLimit RateLimit-Policy X-RateLimit-Limit X-RateLimit-Remaining X-RateLimit-Reset
	}" ;;
	esac
	cat <<EOF
{
	admin off
	auto_https off
	log {
		level ERROR
	}
}
http://127.0.0.1:$port {
	$mw
	respond "ok" 200
}
EOF
}

# cpu PID: the process's CPU (user + system) in clock ticks.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# bench URL CADDY_PID [SCRIPT]: wrk's requests/s, and the CPU microseconds
# per request of that Caddy and of the node ($node_pid); fails on any
# non-2xx answer.
bench() {
	local out c0 n0 c1 n1
	c0=$(cpu "$2") n0=$(cpu "$node_pid")
	out=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" -H "X-API-Key: hot" ${3:+-s "$3"} "$1")
	c1=$(cpu "$2") n1=$(cpu "$node_pid")
	if grep -q "Non-2xx" <<<"$out"; then
		echo "caddy-gateway: $1: $(grep Non-2xx <<<"$out")" >&2
		return 1
	fi
	awk -v c=$((c1 - c0)) -v n=$((n1 - n0)) -v hz="$hz" '
		/requests in/ {reqs = $1}
		/Requests\/sec/ {rps = $2}
		END {printf "%s %.1f %.1f", rps, 1e6 * c / hz / reqs, 1e6 * n / hz / reqs}' <<<"$out"
}

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

echo "| store | phase | config | requests/s (median of $ROUNDS) | runs | ratio | Caddy CPU per request (median) | node CPU per request (median) |"
echo "|---|---|---|---|---|---|---|---|"
for store in $STORES; do
	args=()
	if [ "$store" = redis ]; then
		rport=$(freeport)
		redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" --loglevel warning >"$tmp/redis.log" 2>&1 &
		pids+=($!)
		waitport "$rport"
		args=(-redis "127.0.0.1:$rport")
	fi
	nport=$(freeport)
	"$SLUICED" -listen "127.0.0.1:$nport" -rules "$tmp/rules.yaml" -client-token "$token" -log-level warn "${args[@]}" >"$tmp/sluiced-$store.log" 2>&1 &
	node_pid=$!
	pids+=($!)
	waitport "$nport"
	declare -A port cpid
	for cfg in plain sluice forward_auth; do
		port[$cfg]=$(freeport)
		caddyfile "$cfg" "${port[$cfg]}" "127.0.0.1:$nport" >"$tmp/$cfg-$store.Caddyfile"
		SLUICE_CLIENT_TOKEN=$token "$CADDY" run --adapter caddyfile --config "$tmp/$cfg-$store.Caddyfile" >"$tmp/caddy-$cfg-$store.log" 2>&1 &
		cpid[$cfg]=$!
		pids+=($!)
		waitport "${port[$cfg]}"
	done
	# The leased key's first request leases it (and warms every Caddy).
	for cfg in plain sluice forward_auth; do
		curl -fsS -H "X-API-Key: hot" "http://127.0.0.1:${port[$cfg]}/" >/dev/null
	done
	declare -A runs=() ccpu=() ncpu=()
	record() { # record PHASE CFG "RPS CADDY_US NODE_US"
		local v=($3)
		runs[$1-$2]+="${v[0]} " ccpu[$1-$2]+="${v[1]} " ncpu[$1-$2]+="${v[2]} "
	}
	for r in $(seq "$ROUNDS"); do
		order="plain sluice" cold="forward_auth sluice"
		if ((r % 2 == 0)); then # every other round the other way round
			order="sluice plain" cold="sluice forward_auth"
		fi
		for cfg in $order; do
			record leased "$cfg" "$(bench "http://127.0.0.1:${port[$cfg]}/" "${cpid[$cfg]}")"
		done
		for cfg in $cold; do
			export PREFIX="$store-$r-$cfg-$(date +%s)-" # fresh keys: cold for the Limiter and the node
			record cold "$cfg" "$(bench "http://127.0.0.1:${port[$cfg]}/" "${cpid[$cfg]}" bench/testdata/zipf-key.lua)"
		done
	done
	med() { tr ' ' '\n' <<<"$1" | grep . | median; }
	for phase in leased cold; do
		base=plain
		[ "$phase" = cold ] && base=forward_auth
		mb=$(med "${runs[$phase-$base]}") ms=$(med "${runs[$phase-sluice]}")
		echo "| $store | $phase | $base | $mb | ${runs[$phase-$base]}| | $(med "${ccpu[$phase-$base]}") µs | $(med "${ncpu[$phase-$base]}") µs |"
		echo "| $store | $phase | sluice | $ms | ${runs[$phase-sluice]}| $(awk -v a="$ms" -v b="$mb" 'BEGIN {printf "%.2f×", a/b}') | $(med "${ccpu[$phase-sluice]}") µs | $(med "${ncpu[$phase-sluice]}") µs |"
	done
	unset port cpid runs ccpu ncpu
done
