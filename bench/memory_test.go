package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestNodeMemoryPerKey measures a node's memory per active key through
// its HTTP API, with SLUICE_MEMORY_KEYS=N (say 1000000; unset, the test
// is skipped: it takes a minute or more): it builds sluiced, starts it on
// the in-memory store and then on a redis-server of its own, checks N
// distinct keys of one token_bucket rule once each through POST /v1/checks
// (batches of 100, 4 connections, loopback; -lease-idle 1h, so that every
// key is still active at the end), and logs the node's resident
// set (VmRSS of /proc/<pid>/status) before and after, per key, beyond the
// key's own bytes, then the collector's side from the node's /metrics (its
// heap, heap goal, idle heap, other runtime memory and collections; GOGC
// in the test's environment reaches the node and turns its -gc-headroom
// policy off):
//
//	SLUICE_MEMORY_KEYS=1000000 go test -count=1 -run NodeMemoryPerKey -v ./bench/
func TestNodeMemoryPerKey(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SLUICE_MEMORY_KEYS"))
	if n <= 0 {
		t.Skip("set SLUICE_MEMORY_KEYS=1000000 to measure a node's memory per key")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "sluiced")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/sluiced").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rules := filepath.Join(dir, "rules.yaml")
	// 100 a day: a token takes 14 minutes to refill, so every key's state
	// is still what the limit must remember at the end of the run (with a
	// limit of 1000 a second, a key checked once is full again 1ms later
	// and a store deciding in place rightly forgets it).
	if err := os.WriteFile(rules, []byte("rules:\n  - name: mem\n    algorithm: token_bucket\n    limit: 100\n    period: 24h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("memory", func(t *testing.T) { memoryPerKey(t, bin, rules, "", n) })
	t.Run("memory-leases", func(t *testing.T) { memoryPerKey(t, bin, rules, "", n, "-memory-leases") })
	t.Run("redis", func(t *testing.T) {
		if _, err := exec.LookPath("redis-server"); err != nil {
			t.Skip("redis-server not installed")
		}
		redis, addr, err := StartRedis("", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer redis.Stop(5 * time.Second)
		memoryPerKey(t, bin, rules, addr, n)
	})
}

func memoryPerKey(t *testing.T, bin, rules, redisAddr string, n int, extra ...string) {
	addr, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// Keys stay active for the whole run: none is idle long enough to
	// return its tokens.
	args := []string{"-listen", addr, "-rules", rules, "-log-level", "warn", "-lease-idle", "1h"}
	if redisAddr != "" {
		args = append(args, "-redis", redisAddr)
	}
	args = append(args, extra...)
	p, err := StartProcess("sluiced", bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(10 * time.Second)
	if err := WaitHTTP(addr, "/readyz", p, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	key := func(i int) string { return fmt.Sprintf("key-%07d", i) }
	// One batch first, so that the pools and buffers of a running node are
	// in the first reading.
	checkKeys(t, addr, 0, 100, key)
	before := rss(t, p.Pid())
	start := time.Now()
	const workers = 4
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lo, hi := 100+(n-100)*w/workers, 100+(n-100)*(w+1)/workers
			checkKeys(t, addr, lo, hi, key)
		}()
	}
	wg.Wait()
	took := time.Since(start)
	after := rss(t, p.Pid())
	// The first key is still remembered: 99 of its 100 left.
	status, body, err := peek(addr, key(100))
	if err != nil || status != fasthttp.StatusOK || !bytes.Contains(body, []byte(`"remaining":99`)) {
		t.Fatalf("peek of the first key after the run: %d %s %v; want 99 remaining", status, body, err)
	}
	keyBytes := len(key(0))
	perKey := float64(after-before) / float64(n-100)
	t.Logf("%d keys in %v: RSS %d -> %d MiB, %.0f B per key, %.0f B beyond the key's %d bytes",
		n, took.Round(time.Millisecond), before>>20, after>>20, perKey, perKey-float64(keyBytes), keyBytes)
	// The collector's side: the heap it let grow (the heap goal is live ×
	// (1 + GOGC/100) at the last collection; -gc-headroom, or GOGC in
	// the environment, sets that percent) and how often it ran.
	m := goMetrics(t, addr, "go_memstats_heap_alloc_bytes", "go_memstats_next_gc_bytes", "go_memstats_heap_inuse_bytes",
		"go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes", "go_memstats_sys_bytes", "go_gc_duration_seconds_count",
		"go_memstats_stack_sys_bytes", "go_memstats_gc_sys_bytes", "go_memstats_other_sys_bytes", "go_memstats_mspan_sys_bytes", "go_goroutines")
	t.Logf("heap %d MiB (goal %d MiB), in use %d MiB, idle %d MiB of which released %d MiB, from the OS %d MiB; %.0f collections (GOGC=%q in the environment)",
		int64(m[0])>>20, int64(m[1])>>20, int64(m[2])>>20, int64(m[3])>>20, int64(m[4])>>20, int64(m[5])>>20, m[6], os.Getenv("GOGC"))
	t.Logf("stacks %d MiB, GC metadata %d MiB, other %d MiB, spans %d MiB, %.0f goroutines", int64(m[7])>>20, int64(m[8])>>20, int64(m[9])>>20, int64(m[10])>>20, m[11])
}

// goMetrics reads the named metrics (unlabelled) from the node's /metrics.
func goMetrics(t *testing.T, addr string, names ...string) []float64 {
	status, body, err := fasthttp.Get(nil, "http://"+addr+"/metrics")
	if err != nil || status != fasthttp.StatusOK {
		t.Fatalf("GET /metrics: %d %v", status, err)
	}
	vals := make([]float64, len(names))
	for _, line := range strings.Split(string(body), "\n") {
		name, v, ok := strings.Cut(line, " ")
		for i, want := range names {
			if ok && name == want {
				if vals[i], err = strconv.ParseFloat(v, 64); err != nil {
					t.Fatalf("/metrics %s: %v", line, err)
				}
			}
		}
	}
	return vals
}

// checkKeys checks the keys of [lo, hi) once each, in batches of 100.
func checkKeys(t *testing.T, addr string, lo, hi int, key func(int) string) {
	c := &fasthttp.HostClient{Addr: addr}
	req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	var body bytes.Buffer
	for i := lo; i < hi; i += 100 {
		body.Reset()
		body.WriteString(`{"checks":[`)
		for k := i; k < min(i+100, hi); k++ {
			if k > i {
				body.WriteByte(',')
			}
			body.WriteString(`{"rule":"mem","key":"` + key(k) + `"}`)
		}
		body.WriteString(`]}`)
		req.Reset()
		req.SetRequestURI("http://" + addr + "/v1/checks")
		req.Header.SetMethod("POST")
		req.SetBody(body.Bytes())
		if err := c.Do(req, res); err != nil {
			t.Error(err)
			return
		}
		if res.StatusCode() != fasthttp.StatusOK || bytes.Contains(res.Body(), []byte(`"error"`)) {
			t.Errorf("POST /v1/checks: %d %.200s", res.StatusCode(), res.Body())
			return
		}
	}
}

// peek checks key with hits 0.
func peek(addr, key string) (int, []byte, error) {
	req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	req.SetRequestURI("http://" + addr + "/v1/check")
	req.Header.SetMethod("POST")
	req.SetBodyString(`{"rule":"mem","key":"` + key + `","hits":0}`)
	if err := fasthttp.Do(req, res); err != nil {
		return 0, nil, err
	}
	return res.StatusCode(), append([]byte(nil), res.Body()...), nil
}

// rss is the resident set of process pid, in bytes.
func rss(t *testing.T, pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("/proc/%d/status: no VmRSS", pid)
	return 0
}
