# Sluice — the single entry point: run, test, race, bench, fuzz, lint.
GO       ?= go
BIN      := .bin
LISTEN   ?= 127.0.0.1:8080
RULES    ?= deploy/rules.example.yaml
FUZZTIME ?= 10s
MODELTIME ?= 10s
BENCHTIME ?= 1s
MUTATE_MAX ?= 40
MUTATE_J ?= 2

.PHONY: all build caddy run cluster cluster-status cluster-stop test test-valkey race e2e e2e-deps e2e-rls-redis bench bench-go fuzz mutate-lua lint deps clean

all: lint test

## build: the binaries in $(BIN)/; the tag vtprotobuf compiles go-control-plane's generated
## marshalling, which the Envoy RLS server (node/rls) uses for its responses.
build:
	$(GO) build -tags vtprotobuf -o $(BIN)/ ./cmd/...

## caddy: Caddy with the Sluice handler (contrib/caddy, its own Go module) in $(BIN)/caddy-sluice.
caddy:
	cd contrib/caddy && $(GO) build -o ../../$(BIN)/caddy-sluice ./cmd/caddy

## run: build and start one node on the in-memory store with the example rules, on
## loopback (LISTEN=:8080 listens on every interface).
run: build
	$(BIN)/sluiced -listen $(LISTEN) -rules $(RULES)

## cluster: build, then start a redis-server on 127.0.0.1:6390 and NODES (3) nodes on
## 127.0.0.1:8081.. (gossip 7941..), sharing a generated cluster key (deploy/local-cluster.sh).
NODES ?= 3
cluster: deps
	deploy/local-cluster.sh start $(NODES)

## cluster-status: the members node 1 sees and every node's /readyz.
cluster-status:
	deploy/local-cluster.sh status

## cluster-stop: stop the nodes `make cluster` started (one at a time), then its Redis.
cluster-stop:
	deploy/local-cluster.sh stop

## deps: make sure what the tests need is installed (redis-server, valkey-server and gcc through
## apt when root). Debian 12 has Valkey in bookworm-backports only: deps adds that suite to apt's
## sources when apt does not read it (in the format of the machine's sources, Debian's mirror),
## and installs valkey-server alone from it (-t); it changes no other source and pins nothing.
deps:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v gcc >/dev/null 2>&1 || missing="$$missing gcc"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing$$missing (apt-get)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else \
			echo "missing:$$missing — install it (Debian/Ubuntu: sudo apt-get install$$missing) and run make test again" >&2; \
			exit 1; \
		fi; \
	fi
	@command -v valkey-server >/dev/null 2>&1 && command -v valkey-cli >/dev/null 2>&1 && exit 0; \
	ID=; VERSION_CODENAME=; if [ -r /etc/os-release ]; then . /etc/os-release; fi; \
	bpo=; if [ "$$ID" = debian ] && [ "$$VERSION_CODENAME" = bookworm ]; then bpo=bookworm-backports; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
		echo "missing: valkey-server — install it (Debian/Ubuntu: sudo apt-get install $${bpo:+-t $$bpo }valkey-server$${bpo:+, with $$bpo in apt's sources}) and run make test again" >&2; \
		exit 1; \
	fi; \
	if [ -n "$$bpo" ] && ! apt-get indextargets --format '$$(RELEASE)' | grep -qx "$$bpo"; then \
		site=$$(apt-get indextargets --format '$$(SITE) $$(RELEASE)' | awk -v r="$$VERSION_CODENAME" '$$2 == r { print $$1; exit }'); \
		site=$${site:-http://deb.debian.org/debian}; key=/usr/share/keyrings/debian-archive-keyring.gpg; \
		if grep -qs '^[[:space:]]*deb[[:space:]]' /etc/apt/sources.list; then file=/etc/apt/sources.list.d/$$bpo.list; \
		else file=/etc/apt/sources.list.d/$$bpo.sources; fi; \
		if [ -e "$$file" ]; then echo "$$file exists but apt does not read $$bpo from it: enable it, or install valkey-server yourself" >&2; exit 1; fi; \
		if [ "$${file%.list}" != "$$file" ]; then \
			echo "deb $$([ -f $$key ] && echo "[signed-by=$$key] ")$$site $$bpo main" > "$$file"; \
		else \
			printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\n' "$$site" "$$bpo" > "$$file"; \
			if [ -f $$key ]; then echo "Signed-By: $$key" >> "$$file"; fi; \
		fi; \
		echo "added $$bpo to apt's sources: $$file"; \
	fi; \
	echo "installing valkey-server (apt-get$${bpo:+ -t $$bpo})"; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $${bpo:+-t $$bpo} valkey-server >/dev/null

## test: install what is missing, then run every test; then, again on Valkey, the packages whose
## tests start a Redis (test-valkey).
test: deps
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -tags vtprotobuf ./node/rls/
	@$(MAKE) --no-print-directory test-valkey

## test-valkey: the packages whose tests start a Redis through lua/redistest, on Valkey 8
## (SLUICE_TEST_REDIS=valkey: valkey-server and valkey-cli) instead of Redis 7.
test-valkey: deps
	@pkgs="./lua/redistest $$(grep -rl --include='*_test.go' --exclude-dir=contrib 'sluice/lua/redistest"' . | xargs -r -n1 dirname | sort -u)"; \
	echo "on Valkey:" $$pkgs; \
	SLUICE_TEST_REDIS=valkey $(GO) test -count=1 $$pkgs

## race: every test under the race detector.
race: deps
	$(GO) test -race -count=1 ./...

## e2e-deps: the binaries of the end-to-end tests (Debian packages; apt-get when root).
e2e-deps: deps
	@missing=""; \
	command -v nginx >/dev/null 2>&1 || missing="$$missing nginx"; \
	command -v caddy >/dev/null 2>&1 || missing="$$missing caddy"; \
	command -v prometheus >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v nghttp >/dev/null 2>&1 && command -v h2load >/dev/null 2>&1 || missing="$$missing nghttp2-client"; \
	{ python3 -c 'import grpc' || /usr/bin/python3 -c 'import grpc'; } >/dev/null 2>&1 || missing="$$missing python3-grpcio"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing$$missing (apt-get)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else \
			echo "missing:$$missing — install it (Debian/Ubuntu: sudo apt-get install$$missing) and run make e2e again" >&2; \
			exit 1; \
		fi; \
	fi

## e2e: end-to-end tests against real gateways and tools (TestE2E* behind the e2e build tag),
## in the packages that have some (building every package's tests would double the time),
## then those of contrib/caddy (another module) against the built sluiced and caddy-sluice.
e2e: e2e-deps build caddy
	@pkgs=$$(grep -rl --include='*_test.go' --exclude-dir=contrib '^//go:build e2e' . | xargs -r -n1 dirname | sort -u); \
	echo "e2e packages:" $$pkgs; \
	SLUICE_E2E_SLUICED=$(CURDIR)/$(BIN)/sluiced $(GO) test -tags e2e -count=1 -v -run '^TestE2E' $$pkgs
	cd contrib/caddy && SLUICE_E2E_SLUICED=$(CURDIR)/$(BIN)/sluiced SLUICE_E2E_CADDY=$(CURDIR)/$(BIN)/caddy-sluice \
		$(GO) test -tags e2e -count=1 -v -run '^TestE2E' ./...
	@$(MAKE) --no-print-directory e2e-rls-redis

## e2e-rls-redis: the Envoy rate limit service's end-to-end tests (node/rls) again with sluiced on
## the Redis store, on Redis and on Valkey: each transport against a server of its own (the tests'
## keys repeat across transports), named by SLUICE_REDIS in the environment sluiced inherits. A run
## that leaves no key in its server (sluiced did not use it) fails.
e2e-rls-redis: e2e-deps build
	@for flavor in redis valkey; do for tr in lean grpc; do \
		dir=$$(mktemp -d); \
		port=$$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'); \
		$$flavor-server --port $$port --bind 127.0.0.1 --save '' --appendonly no --dir $$dir --logfile $$dir/log & pid=$$!; \
		trap 'kill $$pid 2>/dev/null' EXIT INT TERM; \
		n=0; until $$flavor-cli -p $$port ping >/dev/null 2>&1; do \
			n=$$((n + 1)); if [ $$n -gt 100 ]; then echo "$$flavor-server did not start:" >&2; cat $$dir/log >&2; exit 1; fi; sleep 0.1; \
		done; \
		echo "== node/rls e2e, $$tr transport, Redis store on $$($$flavor-server --version | cut -d' ' -f1-3)"; \
		SLUICE_REDIS=127.0.0.1:$$port SLUICE_E2E_SLUICED=$(CURDIR)/$(BIN)/sluiced \
			$(GO) test -tags e2e -count=1 -run "^TestE2E.*/$$tr\$$" ./node/rls/; rc=$$?; \
		keys=$$($$flavor-cli -p $$port dbsize); kill $$pid; wait $$pid 2>/dev/null; rm -rf $$dir; \
		if [ $$rc != 0 ]; then exit $$rc; fi; \
		if [ "$$keys" -gt 0 ] 2>/dev/null; then :; else echo "sluiced wrote no key to $$flavor-server: it did not run on the Redis store" >&2; exit 1; fi; \
	done; done

.PHONY: faults faults-deps

## faults-deps: ip (iproute2) and iptables for the partition table (Debian packages; apt-get when root).
faults-deps: deps
	@missing=""; \
	command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	command -v iptables >/dev/null 2>&1 || missing="$$missing iptables"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing$$missing (apt-get)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else \
			echo "missing:$$missing — install it (Debian/Ubuntu: sudo apt-get install$$missing) and run make faults again" >&2; \
			exit 1; \
		fi; \
	fi

## faults: the partition table of docs/faults.md, as root: three sluiced, Redis and a client in network
## namespaces on a bridge, nodes cut off with iptables under load, every answer checked (about 4 minutes;
## everything it makes is removed, also on failure or Ctrl-C). SLUICE_NETNS_ROWS=name,... runs some rows.
NETNS_ROWS ?=
faults: faults-deps
	SLUICE_NETNS_ROWS=$(NETNS_ROWS) $(GO) test -tags netns -count=1 -timeout 20m -v -run '^TestNetns$$' ./cmd/sluiced/

## bench-go: the Go micro-benchmarks of the hot paths.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./lease/ ./node/... ./shard/

## bench: the standard sluice-bench suite (starts and stops Redis and nodes), writes a report.
bench: deps build
	./bench/run-suite.sh

## fuzz: run every fuzz target for FUZZTIME each, then the model-based tests' long form (new seeds for MODELTIME per run).
fuzz:
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' .); do \
		pkg=./$$(dirname $$f); \
		for t in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$f | sed 's/^func //'); do \
			echo "== $$pkg $$t"; \
			$(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done
	SLUICE_MODEL_TIME=$(MODELTIME) $(GO) test -count=1 -timeout 0 -v -run '^TestModel$$' ./lease/ ./lua/

## mutate-lua: the Lua scripts' mutation harness (lua/testdata/mutate): MUTATE_MAX single-line
## mutants per script (0: all 3,987, some hours), MUTATE_J at a time, each must fail the parity
## tests or be listed equivalent. Not part of test: minutes of redis-server per run.
mutate-lua:
	$(GO) run ./lua/testdata/mutate -max $(MUTATE_MAX) -j $(MUTATE_J)

## lint: gofmt and go vet must be clean (contrib/caddy, its own module, included).
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd contrib/caddy && $(GO) vet ./...

clean:
	rm -rf $(BIN)
