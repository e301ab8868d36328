#!/usr/bin/env bash
# envoy-integration.sh runs envoyproxy/ratelimit's own integration tests
# (test/integration, build tag "integration") against sluiced, with
# envoy's configuration files (test/integration/runtime) byte for byte.
#
#   RATELIMIT_DIR=/work/ext/ratelimit node/rls/testdata/envoy-integration.sh
#
# RATELIMIT_DIR is a checkout of github.com/envoyproxy/ratelimit (this
# script neither fetches nor changes it, but for the file its reload test
# adds and removes itself). Nothing of envoy's is copied into this
# repository or built into Sluice: the tests are compiled in that checkout,
# with its own go.mod, with `go test -overlay` putting two files in place,
# both made in a temporary directory:
#
#   - integration_test.go, envoy's, with three mechanical edits (sed): its
#     runner, startTestRunner, becomes startSluice, and the type
#     waitForConfigReload takes becomes sluiceRunner; a counter call is put
#     before each assertion statement (assert.X(...), common.AssertProtoEqual).
#   - sluice_shim_test.go (below, Sluice's code): startSluice starts a
#     sluiced process per runner (-rls-listen on the port the test dials,
#     -rls-config on the test's runtime directory, -redis on the Redis the
#     test started), Stop sends it SIGTERM; GetStatsStore reads Sluice's
#     Prometheus metrics for the statistics the test reads (total_hits,
#     over_limit, near_limit, shadow_mode per descriptor;
#     config_load_success), and counts the reads of statistics Sluice does
#     not have (envoy's local cache's: read as 0). A runner asked for what
#     only envoy has (its memcache backend, its local cache, its
#     STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, stats tags, the xDS
#     configuration source, its Redis over stunnel, Redis Cluster and
#     Sentinel setups of its docker-compose) skips its test, saying why.
#     A runner with gRPC server TLS gets sluiced with -tls-cert and
#     -tls-key (and -rls-client-ca for a client CA): envoy's certificate
#     files, which its reload test replaces under the running server.
#
# Variables: RATELIMIT_DIR (required); RUN, SKIP (go test -run/-skip;
# SKIP defaults to the tests needing memcached, TestBasicTLSConfig, whose
# setup loads the certificates of envoy's Makefile before any runner
# starts, and Test_mTLSSetup, a test of envoy's certificate helper);
# KEEP=1 keeps the temporary directory.
set -euo pipefail

: "${RATELIMIT_DIR:?set RATELIMIT_DIR to a checkout of github.com/envoyproxy/ratelimit}"
RATELIMIT_DIR=$(cd "$RATELIMIT_DIR" && pwd)
ITEST="$RATELIMIT_DIR/test/integration"
[ -f "$ITEST/integration_test.go" ] || { echo "no $ITEST/integration_test.go" >&2; exit 2; }
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
RUN=${RUN:-.}
SKIP=${SKIP:-Memcache|Test_mTLSSetup|TestBasicTLSConfig}

WORK=$(mktemp -d)
if [ "${KEEP:-}" != 1 ]; then trap 'rm -rf "$WORK"' EXIT; else echo "work directory: $WORK"; fi

(cd "$REPO" && go build -tags vtprotobuf -o "$WORK/sluiced" ./cmd/sluiced)

sed -e 's/startTestRunner(t, /startSluice(t, /g' \
    -e 's/func waitForConfigReload(runner \*runner\.Runner,/func waitForConfigReload(runner *sluiceRunner,/' \
    -e 's/^\([[:space:]]*\)\(assert\.[A-Z][A-Za-z]*(\|common\.AssertProtoEqual(\)/\1countAssert(); \2/' \
    "$ITEST/integration_test.go" > "$WORK/integration_test.go"

cat > "$WORK/sluice_shim_test.go" <<'EOF'
//go:build integration

package integration_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gostats "github.com/lyft/gostats"

	"github.com/envoyproxy/ratelimit/src/settings"
)

var (
	asserts  atomic.Int64 // assertion statements run
	unmapped sync.Map     // statistic name → reads (no Sluice equivalent)
)

func countAssert() { asserts.Add(1) }

func TestMain(m *testing.M) {
	code := m.Run()
	fmt.Printf("sluice-shim: %d assertion statements run\n", asserts.Load())
	var names []string
	unmapped.Range(func(k, v any) bool {
		names = append(names, fmt.Sprintf("%s (%d reads)", k, v.(*atomic.Int64).Load()))
		return true
	})
	sort.Strings(names)
	for _, n := range names {
		fmt.Printf("sluice-shim: read as 0, no Sluice equivalent: %s\n", n)
	}
	os.Exit(code)
}

// sluiceRunner stands for envoy's runner: a sluiced process.
type sluiceRunner struct {
	t       *testing.T
	cmd     *exec.Cmd
	metrics string // URL of its /metrics
	log     string
	done    chan struct{}
}

// envoyOnly is why s asks for what only envoyproxy/ratelimit has ("" if not).
func envoyOnly(s settings.Settings) string {
	switch {
	case s.BackendType != "redis":
		return "the " + s.BackendType + " backend"
	case s.ConfigType == "GRPC_XDS_SOTW":
		return "the xDS configuration source"
	case s.RedisTls || s.RedisPerSecondTls:
		return "Redis over TLS through envoy's stunnel setup"
	case !strings.EqualFold(s.RedisType, "single"), s.RedisPerSecond && !strings.EqualFold(s.RedisPerSecondType, "single"):
		return "the Redis " + strings.ToLower(s.RedisType) + " of envoy's docker-compose setup"
	case s.LocalCacheSizeInBytes > 0:
		return "envoy's local cache (LOCAL_CACHE_SIZE_IN_BYTES), asserted through its statistics"
	case s.StopCacheKeyIncrementWhenOverlimit:
		return "envoy's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"
	case len(s.ExtraTags) > 0:
		return "the tags of envoy's statistics (EXTRA_TAGS)"
	}
	return ""
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startSluice starts sluiced in place of envoy's runner of s: the RLS on
// s.GrpcPort, the configuration of s's runtime directory, the Redis of
// s.RedisUrl (with s.RedisAuth).
func startSluice(t *testing.T, s settings.Settings) *sluiceRunner {
	t.Helper()
	if why := envoyOnly(s); why != "" {
		t.Skipf("sluice-shim: envoy-only: %s", why)
	}
	redis := "redis://"
	if s.RedisAuth != "" {
		redis += ":" + url.QueryEscape(s.RedisAuth) + "@"
	}
	redis += s.RedisUrl
	httpPort := freePort(t)
	dir := filepath.Join(s.RuntimePath, s.RuntimeSubdirectory, s.RuntimeAppDirectory)
	r := &sluiceRunner{t: t, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", httpPort), done: make(chan struct{})}
	r.log = filepath.Join(t.TempDir(), "sluiced.log")
	logf, err := os.Create(r.log)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-listen", fmt.Sprintf("127.0.0.1:%d", httpPort),
		"-rls-listen", fmt.Sprintf("localhost:%d", s.GrpcPort),
		"-rls-config", dir, "-redis", redis, "-rules-poll", "200ms"}
	if s.GrpcServerUseTLS {
		// The node serves its HTTP API over TLS too: the metrics are
		// read over https from loopback, the certificate not verified
		// (envoy's test makes it for the gRPC port only).
		args = append(args, "-tls-cert", s.GrpcServerTlsCert, "-tls-key", s.GrpcServerTlsKey)
		if s.GrpcClientTlsCACert != "" {
			args = append(args, "-rls-client-ca", s.GrpcClientTlsCACert)
		}
		r.metrics = "https" + strings.TrimPrefix(r.metrics, "http")
	}
	r.cmd = exec.Command(os.Getenv("SLUICED"), args...)
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.cmd.Wait(); logf.Close(); close(r.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("localhost:%d", s.GrpcPort))
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-r.done:
			out, _ := os.ReadFile(r.log)
			t.Fatalf("sluiced exited:\n%s", out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluiced does not listen on %d", s.GrpcPort)
		}
		time.Sleep(20 * time.Millisecond)
	}
	asserted := asserts.Load()
	t.Cleanup(func() {
		t.Logf("sluice-shim: %d assertion statements in %s", asserts.Load()-asserted, t.Name())
		if t.Failed() {
			out, _ := os.ReadFile(r.log)
			t.Logf("sluice-shim: sluiced's log:\n%s", out)
		}
	})
	return r
}

// Stop stops sluiced as a deployment does: SIGTERM, and waits.
func (r *sluiceRunner) Stop() {
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
		r.t.Errorf("sluiced did not stop on SIGTERM within 30s")
	}
}

func (r *sluiceRunner) GetStatsStore() gostats.Store {
	return sluiceStats{statsStore: gostats.NewStore(gostats.NewNullSink(), false), r: r}
}

// sluiceStats reads the statistics the tests read from sluiced's metrics.
type sluiceStats struct {
	statsStore
	r *sluiceRunner
}

// statsStore is gostats.Store under a name that leaves Store(), a method
// of the interface, promoted.
type statsStore = gostats.Store

func (s sluiceStats) Flush() {}

func (s sluiceStats) NewCounter(name string) gostats.Counter {
	return sluiceCounter{Counter: s.statsStore.NewCounter(name), s: s, name: name}
}

func (s sluiceStats) NewCounterWithTags(name string, tags map[string]string) gostats.Counter {
	return sluiceCounter{Counter: s.statsStore.NewCounterWithTags(name, tags), s: s, name: name}
}

func (s sluiceStats) NewGauge(name string) gostats.Gauge {
	return sluiceGauge{Gauge: s.statsStore.NewGauge(name), s: s, name: name}
}

type sluiceCounter struct {
	gostats.Counter
	s    sluiceStats
	name string
}

func (c sluiceCounter) Value() uint64 { return c.s.value(c.name) }

type sluiceGauge struct {
	gostats.Gauge
	s    sluiceStats
	name string
}

func (g sluiceGauge) Value() uint64 { return g.s.value(g.name) }

// series is the Sluice series of envoy statistic name, "" when none.
func series(name string) string {
	switch name {
	case "ratelimit.service.config_load_success":
		return "sluice_rls_config_loads_total"
	case "ratelimit.service.config_load_error":
		return "sluice_rls_config_errors_total"
	}
	rest, ok := strings.CutPrefix(name, "ratelimit.service.rate_limit.")
	if !ok {
		return ""
	}
	i, j := strings.IndexByte(rest, '.'), strings.LastIndexByte(rest, '.')
	if i < 0 || j <= i {
		return ""
	}
	domain, desc, stat := rest[:i], rest[i+1:j], rest[j+1:]
	switch stat {
	case "total_hits", "over_limit", "near_limit", "shadow_mode":
		return fmt.Sprintf(`sluice_rls_%s{domain=%q,descriptor=%q}`, stat, domain, desc)
	}
	return ""
}

// metricsClient reads sluiced's metrics on loopback, over https when the
// runner serves TLS (with envoy's test certificate, not verified here).
var metricsClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

func (s sluiceStats) value(name string) uint64 {
	ser := series(name)
	if ser == "" {
		n, _ := unmapped.LoadOrStore(name, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		return 0
	}
	resp, err := metricsClient.Get(s.r.metrics)
	if err != nil {
		s.r.t.Errorf("sluice-shim: %v", err)
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), ser+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return uint64(f)
		}
	}
	return 0
}
EOF

printf '{"Replace":{"%s":"%s","%s":"%s"}}\n' \
  "$ITEST/integration_test.go" "$WORK/integration_test.go" \
  "$ITEST/sluice_shim_test.go" "$WORK/sluice_shim_test.go" > "$WORK/overlay.json"

cd "$ITEST"
set +e
SLUICED="$WORK/sluiced" go test -tags integration -overlay "$WORK/overlay.json" -count=1 -v \
  -run "$RUN" -skip "$SKIP" -timeout 30m . 2>&1 | tee "$WORK/out.txt"
code=${PIPESTATUS[0]}
set -e

echo
echo "== summary"
grep -E '^\s*--- (PASS|FAIL|SKIP)' "$WORK/out.txt" | awk '{print $2}' | sort | uniq -c
grep -E '^sluice-shim:' "$WORK/out.txt" || true
grep -E 'sluice-shim: envoy-only' "$WORK/out.txt" | sed 's/^ *//' | sort | uniq -c || true
exit "$code"
