#!/usr/bin/env bash
# A Sluice cluster on this machine: one redis-server and N sluiced nodes on
# loopback, sharing a generated cluster key and deploy/rules.example.yaml.
#
#   deploy/local-cluster.sh start [N]   build .bin/sluiced (make build), start Redis and N nodes (default 3)
#   deploy/local-cluster.sh status      members seen by node 1, /readyz of every node
#   deploy/local-cluster.sh smoke [KEY] 6 checks of rule per-key spread over the nodes: expects 5×200 then 429
#   deploy/local-cluster.sh stop        SIGTERM the nodes, wait, stop Redis
#
# status exits 0 when every node is ready, 1 when something is wrong, 3 when
# no local cluster is running (as systemctl status); stop exits 0, also when
# there was nothing to stop, and says what it stopped.
#
# Node i (1-based) serves HTTP on 127.0.0.1:$((HTTP_BASE+i-1)) and gossip on
# 127.0.0.1:$((GOSSIP_BASE+i-1)); every node joins node 1. Logs, pids and
# the cluster key live in the state directory. Environment:
#   SLUICE_LOCAL_DIR          state directory   (default ${TMPDIR:-/tmp}/sluice-local)
#   SLUICE_LOCAL_REDIS_PORT   Redis port        (default 6390)
#   SLUICE_LOCAL_HTTP_BASE    first HTTP port   (default 8081)
#   SLUICE_LOCAL_GOSSIP_BASE  first gossip port (default 7941)
#   SLUICE_LOCAL_RULES        rule file         (default deploy/rules.example.yaml)
# Every wait is bounded; nothing listens beyond 127.0.0.1.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
state=${SLUICE_LOCAL_DIR:-${TMPDIR:-/tmp}/sluice-local}
redis_port=${SLUICE_LOCAL_REDIS_PORT:-6390}
http_base=${SLUICE_LOCAL_HTTP_BASE:-8081}
gossip_base=${SLUICE_LOCAL_GOSSIP_BASE:-7941}
rules=${SLUICE_LOCAL_RULES:-$root/deploy/rules.example.yaml}
bin=$root/.bin/sluiced

die() { echo "local-cluster: $*" >&2; exit 1; }
say() { echo "local-cluster: $*"; }

# alive PIDFILE NAME: the pid in PIDFILE runs a process whose command line
# contains NAME (so a recycled pid is never signalled).
alive() {
	local pid
	[ -f "$1" ] || return 1
	pid=$(cat "$1")
	[ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$2"
}

# listening PORT: something accepts TCP connections on 127.0.0.1:PORT.
listening() { (: <"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_for SECONDS DESCRIPTION COMMAND...: run COMMAND every 0.2 s until it
# succeeds or SECONDS pass.
wait_for() {
	local secs=$1 what=$2 i
	shift 2
	for ((i = 0; i < secs * 5; i++)); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}

nodes() { cat "$state/nodes" 2>/dev/null || echo 0; }
# running: a cluster was started from $state (its nodes file) or its Redis
# still runs.
running() { [ "$(nodes)" -gt 0 ] || alive "$state/redis.pid" redis-server; }
not_running() { say "no local cluster is running (none started from $state)"; }
http_port() { echo $((http_base + $1 - 1)); }

http_code() { curl -s -o /dev/null -m 2 -w '%{http_code}' "$@" || true; }
ready() { [ "$(http_code "http://127.0.0.1:$(http_port "$1")/readyz")" = 200 ]; }
# ready_or_gone I: node I is ready, or its process has exited (no use waiting).
ready_or_gone() { ready "$1" || ! alive "$state/n$1.pid" sluiced; }
alive_members() { curl -s -m 2 "http://127.0.0.1:$(http_port "$1")/v1/members" | grep -o '"state":"alive"' | wc -l; }
# all_joined N: every node sees N alive members (so all rings agree).
all_joined() {
	local i
	for ((i = 1; i <= $1; i++)); do
		[ "$(alive_members "$i")" -eq "$1" ] || return 1
	done
}

start() {
	local n=${1:-3} i key
	[[ $n =~ ^[1-9][0-9]?$ ]] || die "start: N must be 1..99, got '$n'"
	command -v redis-server >/dev/null || die "redis-server not found (Debian/Ubuntu: apt-get install redis-server)"
	command -v curl >/dev/null || die "curl not found"
	[ -r "$rules" ] || die "rule file $rules not readable"
	if alive "$state/redis.pid" redis-server || [ "$(nodes)" -gt 0 ]; then
		die "a local cluster seems to run already (state in $state): run '$0 stop' first"
	fi
	listening "$redis_port" && die "port $redis_port (Redis) is already in use: set SLUICE_LOCAL_REDIS_PORT"
	for ((i = 1; i <= n; i++)); do
		listening "$(http_port "$i")" && die "port $(http_port "$i") (node $i HTTP) is already in use: set SLUICE_LOCAL_HTTP_BASE"
		listening $((gossip_base + i - 1)) && die "port $((gossip_base + i - 1)) (node $i gossip) is already in use: set SLUICE_LOCAL_GOSSIP_BASE"
	done

	say "building .bin/sluiced (make build)"
	make -C "$root" --no-print-directory build >/dev/null

	mkdir -p "$state"
	rm -f "$state"/*.pid "$state"/*.log "$state/nodes"

	redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no \
		--daemonize no --dir "$state" --logfile "$state/redis.log" </dev/null >/dev/null 2>&1 &
	echo $! >"$state/redis.pid"
	if ! wait_for 10 redis redis-cli -h 127.0.0.1 -p "$redis_port" ping >/dev/null 2>&1; then
		stop
		die "redis-server did not answer on 127.0.0.1:$redis_port within 10 s (see $state/redis.log)"
	fi
	say "redis-server on 127.0.0.1:$redis_port (pid $(cat "$state/redis.pid"))"

	key=$(head -c 32 /dev/urandom | base64)
	(umask 077 && printf '%s\n' "$key" >"$state/cluster.key")

	echo "$n" >"$state/nodes"
	for ((i = 1; i <= n; i++)); do
		SLUICE_CLUSTER_KEY=$key "$bin" \
			-listen "127.0.0.1:$(http_port "$i")" \
			-gossip "127.0.0.1:$((gossip_base + i - 1))" \
			-join "127.0.0.1:$gossip_base" \
			-redis "127.0.0.1:$redis_port" \
			-rules "$rules" \
			-node-name "n$i" </dev/null >"$state/n$i.log" 2>&1 &
		echo $! >"$state/n$i.pid"
	done
	for ((i = 1; i <= n; i++)); do
		if ! wait_for 20 "node $i" ready_or_gone "$i" || ! ready "$i"; then
			echo "--- last lines of $state/n$i.log" >&2
			tail -n 20 "$state/n$i.log" >&2 || true
			stop
			die "node n$i did not become ready on 127.0.0.1:$(http_port "$i") within 20 s (or exited)"
		fi
	done
	if ! wait_for 20 members all_joined "$n"; then
		stop
		die "the nodes do not all see $n alive members within 20 s"
	fi
	say "$n nodes up: http://127.0.0.1:$(http_port 1) .. http://127.0.0.1:$(http_port "$n"); state, logs and key in $state"
}

status() {
	local n i code p rc=0
	n=$(nodes)
	running || { not_running; return 3; }
	if alive "$state/redis.pid" redis-server; then
		say "redis 127.0.0.1:$redis_port: $(redis-cli -h 127.0.0.1 -p "$redis_port" ping 2>&1)"
	else
		say "redis 127.0.0.1:$redis_port: not running"; rc=1
	fi
	echo "members seen by n1 (GET http://127.0.0.1:$(http_port 1)/v1/members):"
	curl -s -m 2 "http://127.0.0.1:$(http_port 1)/v1/members" || { echo "(no answer)"; rc=1; }
	echo
	for ((i = 1; i <= n; i++)); do
		code=$(http_code "http://127.0.0.1:$(http_port "$i")/readyz")
		alive "$state/n$i.pid" sluiced && p="pid $(cat "$state/n$i.pid")" || p="not running"
		echo "n$i http://127.0.0.1:$(http_port "$i") ($p): /readyz $code"
		[ "$code" = 200 ] || rc=1
	done
	return $rc
}

# smoke [KEY]: six checks of the example rule per-key (5 per 10 s) on one
# key, sent round-robin to the nodes: the cluster must answer 200 five
# times, then 429, whichever node serves each check.
smoke() {
	local key=${1:-smoke-$(date +%s%N)} n i body code got="" want="200 200 200 200 200 429"
	n=$(nodes)
	[ "$n" -gt 0 ] || die "no local cluster is running (none started from $state)"
	for ((i = 0; i < 6; i++)); do
		body=$(curl -s -m 2 -w ' %{http_code}' "http://127.0.0.1:$(http_port $((i % n + 1)))/v1/check" \
			-d "{\"rule\":\"per-key\",\"key\":\"$key\"}" || true)
		code=${body##* }
		echo "check $((i + 1)) via n$((i % n + 1)): $code ${body% *}"
		got="$got $code"
	done
	got=${got# }
	[ "$got" = "$want" ] || die "smoke: got '$got', want '$want'"
	say "smoke ok: 5×200 then 429 across $n nodes (key $key)"
}

# term PIDFILE NAME SECONDS: SIGTERM the process and wait for it to exit;
# SIGKILL it if it is still there after SECONDS. It returns 1 when there
# was no such process.
term() {
	local pid
	alive "$1" "$2" || { rm -f "$1"; return 1; }
	pid=$(cat "$1")
	kill -TERM "$pid" 2>/dev/null || true
	if ! wait_for "$3" "$2" eval "! alive '$1' '$2'"; then
		echo "local-cluster: $2 (pid $pid) still running after ${3}s: SIGKILL" >&2
		kill -KILL "$pid" 2>/dev/null || true
		wait_for 5 "$2" eval "! alive '$1' '$2'" || true
	fi
	rm -f "$1"
}

stop() {
	local n i k=0 redis=""
	n=$(nodes)
	running || { not_running; return 0; }
	# One node at a time, last first: each leaves while its peers are
	# still there to hear it, returns its leased tokens to Redis and
	# drains: ≤ 3 s leave + ≤ 10 s drain, so 20 s is plenty.
	for ((i = n; i >= 1; i--)); do
		term "$state/n$i.pid" sluiced 20 && k=$((k + 1))
	done
	for ((i = 1; i <= n; i++)); do
		if grep -q 'msg=shutdown' "$state/n$i.log" 2>/dev/null; then
			echo "local-cluster: n$i: $(grep 'msg=shutdown' "$state/n$i.log" | tail -n 1)" >&2
		fi
	done
	# Redis last: the nodes return their tokens to it on the way out.
	term "$state/redis.pid" redis-server 10 && redis=" and Redis"
	rm -f "$state/nodes"
	if [ "$k" -eq 0 ] && [ -z "$redis" ]; then
		say "the cluster started from $state had stopped: none of its processes was running (its state is cleared, logs kept)"
		return 0
	fi
	say "stopped $k of $n nodes$redis; logs kept in $state"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
start) start "$@" ;;
status) status ;;
smoke) smoke "$@" ;;
stop) stop ;;
*)
	sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
