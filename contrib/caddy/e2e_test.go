//go:build e2e

package sluicecaddy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The addresses written in the shipped Caddyfile; the test substitutes
// free loopback ports for them and changes nothing else.
const (
	shippedSite   = "http://:8000 {"
	shippedSluice = "http://127.0.0.1:8080"
	shippedApp    = "reverse_proxy 127.0.0.1:3000"
)

// limit is the rule's allowance per key: 20 per hour, nothing refills
// during the test.
const limit = 20

const rulesYAML = `
rules:
  - name: per-key
    algorithm: token_bucket
    limit: 20
    period: 1h
    key: header:X-API-Key
`

const clientToken = "e2e-client-token-0123456789abcdef"

const adminToken = "e2e-admin-token-0123456789abcdef"

// TestE2ECaddyTwoGateways runs two Caddy processes built with the module,
// each with the shipped Caddyfile, in front of one sluiced and one
// backend, and saturates one key through both: together they admit no
// more than the rule's limit (and not far below it), the backend sees
// only the admitted requests, and the client gets the 429 with
// Retry-After and the RateLimit headers.
func TestE2ECaddyTwoGateways(t *testing.T) {
	sluicedBin, caddyBin := binaries(t)
	sl := startSluiced(t, sluicedBin)
	app := startApp(t)
	gws := []string{startCaddy(t, caddyBin, sl, app), startCaddy(t, caddyBin, sl, app)}

	// 4 workers, each sending 15 requests with one key alternately
	// through both gateways: 3× the limit.
	const workers, each = 4, 15
	var admitted, denied atomic.Int64
	perGateway := make([]atomic.Int64, len(gws))
	var mu sync.Mutex
	var deniedAnswer *answer
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				g := (w + i) % len(gws)
				a, err := get(gws[g]+"/api/x", "X-API-Key", "shared")
				if err != nil {
					errs <- err
					return
				}
				switch a.status {
				case 200:
					admitted.Add(1)
					perGateway[g].Add(1)
				case 429:
					denied.Add(1)
					mu.Lock()
					if deniedAnswer == nil {
						deniedAnswer = &a
					}
					mu.Unlock()
				default:
					errs <- fmt.Errorf("gateway %d: %d %q, want 200 or 429", g, a.status, a.body)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	got := admitted.Load()
	t.Logf("admitted %d (gateway 1: %d, gateway 2: %d), denied %d, of %d requests; limit %d",
		got, perGateway[0].Load(), perGateway[1].Load(), denied.Load(), workers*each, limit)
	if got > limit {
		t.Errorf("admitted %d through the two gateways, over the limit %d", got, limit)
	}
	// Loose: tokens one gateway holds and has not spent are not the
	// other's, so the total may fall short of the limit, by what is lent.
	if got < limit/2 {
		t.Errorf("admitted %d through the two gateways, under half the limit %d", got, limit)
	}
	if seen := app.count(); seen != got {
		t.Errorf("the backend saw %d requests, %d were admitted", seen, got)
	}

	// The 429 reaches the client with Retry-After and the RateLimit
	// headers in the node's form.
	if deniedAnswer == nil {
		t.Fatal("no request was denied")
	}
	checkDenied(t, *deniedAnswer)
	for g, base := range gws {
		a, err := get(base+"/api/x", "X-API-Key", "shared")
		if err != nil {
			t.Fatal(err)
		}
		if a.status != 429 {
			t.Errorf("gateway %d after saturation: %d, want 429", g+1, a.status)
		}
		checkDenied(t, a)
	}

	// Another key is its own: allowed, with its remaining tokens shown.
	a, err := get(gws[0]+"/api/x", "X-API-Key", "other")
	if err != nil {
		t.Fatal(err)
	}
	if a.status != 200 || a.body != "app" {
		t.Errorf("first request with another key: %d %q, want 200 from the backend", a.status, a.body)
	}
	if rl := a.hdr.Get("RateLimit"); !strings.HasPrefix(rl, `"per-key";r=`) || strings.HasPrefix(rl, `"per-key";r=0;`) {
		t.Errorf("allowed request with another key: RateLimit %q, want some remaining", rl)
	}

	// Without the key the rule does not apply (the shipped file has no
	// on_missing_key: skip).
	if a, err := get(gws[1] + "/api/x"); err != nil || a.status != 200 {
		t.Errorf("request without a key: %v %d, want 200", err, a.status)
	}
}

func checkDenied(t *testing.T, a answer) {
	t.Helper()
	if ra, err := strconv.Atoi(a.hdr.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("429 without a valid Retry-After: %q (headers %v)", a.hdr.Get("Retry-After"), a.hdr)
	}
	if p := a.hdr.Get("RateLimit-Policy"); p != `"per-key";q=20;w=3600` {
		t.Errorf("429 with RateLimit-Policy %q, want %q", p, `"per-key";q=20;w=3600`)
	}
	if rl := a.hdr.Get("RateLimit"); !strings.HasPrefix(rl, `"per-key";r=0;t=`) {
		t.Errorf("429 with RateLimit %q, want \"per-key\";r=0;t=...", rl)
	}
}

// binaries returns sluiced and Caddy with the module: the paths in
// SLUICE_E2E_SLUICED and SLUICE_E2E_CADDY (make e2e builds them), else
// built here.
func binaries(t *testing.T) (sluiced, caddy string) {
	t.Helper()
	build := func(env, dir, pkg, name string) string {
		if p := os.Getenv(env); p != "" {
			return p
		}
		bin := filepath.Join(t.TempDir(), name)
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
		return bin
	}
	return build("SLUICE_E2E_SLUICED", "../..", "./cmd/sluiced", "sluiced"),
		build("SLUICE_E2E_CADDY", ".", "./cmd/caddy", "caddy-sluice")
}

// startSluiced starts one node on the memory store with the rule file and
// the client token, and waits until it is ready.
func startSluiced(t *testing.T, bin string) string {
	t.Helper()
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte(rulesYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := start(t, bin, nil, "-listen", addr, "-rules", rules, "-client-token", clientToken, "-admin-token", adminToken, "-log-level", "warn")
	base := "http://" + addr
	p.waitReady(t, func() bool {
		a, err := get(base + "/readyz")
		return err == nil && a.status == 200
	}, "sluiced on "+addr)
	return base
}

// TestE2ECaddyStats reads what the node shows of a Caddy gateway: while
// it holds tokens of a key, /v1/stats lends them to one holder named by a
// public id (never the secret it sends), counted under "tokens" and
// "gateway" for the rule; once Caddy stops (its Limiter returns what it
// holds), nothing is lent, what it admitted shows as reported spent, and
// the rest as returned.
func TestE2ECaddyStats(t *testing.T) {
	sluicedBin, caddyBin := binaries(t)
	sl := startSluiced(t, sluicedBin)
	app := startApp(t)
	gw, stop := startCaddyStoppable(t, caddyBin, sl, app)
	const admitted = 5
	for i := 0; i < admitted; i++ {
		if a, err := get(gw+"/api/x", "X-API-Key", "stats"); err != nil || a.status != 200 {
			t.Fatalf("request %d: %v %d, want 200", i, err, a.status)
		}
	}
	st := stats(t, sl)
	g, tok := st.Gateway["per-key"], st.Tokens["per-key"]
	if g.Gateways <= 0 || tok.Gateways != g.Gateways || tok.ShortBound < g.Gateways || len(st.Holders) != 1 {
		t.Fatalf("while Caddy holds tokens: gateway %+v, tokens %+v, holders %+v; want tokens lent to one gateway", g, tok, st.Holders)
	}
	if h := st.Holders[0].Holder; len(h) != 16 || h == strings.Repeat("0", 16) {
		t.Errorf("the holder is shown as %q, want its 16-hex-digit public id", h)
	}
	granted := g.Granted
	stop()
	st = stats(t, sl)
	g = st.Gateway["per-key"]
	if g.Gateways != 0 || g.Reported != admitted || g.Returned != granted-admitted || len(st.Holders) != 0 {
		t.Errorf("after Caddy stopped: %+v, holders %+v; want nothing lent, %d reported (what it admitted), %d returned (%d granted less those)",
			g, st.Holders, admitted, granted-admitted, granted)
	}
}

// statsView is what TestE2ECaddyStats reads of GET /v1/stats.
type statsView struct {
	Tokens map[string]struct {
		Gateways   int64 `json:"gateways"`
		ShortBound int64 `json:"short_bound"`
	} `json:"tokens"`
	Gateway map[string]struct {
		Gateways int64 `json:"gateways"`
		Granted  int64 `json:"granted"`
		Returned int64 `json:"returned"`
		Reported int64 `json:"reported"`
	} `json:"gateway"`
	Holders []struct {
		Holder string `json:"holder"`
	} `json:"gateway_holders"`
}

func stats(t *testing.T, base string) statsView {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/stats", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v statsView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/stats: %d %v", resp.StatusCode, err)
	}
	return v
}

// startCaddy starts Caddy with the shipped Caddyfile (its addresses
// substituted), its state in a temporary directory, and returns its base
// URL.
func startCaddy(t *testing.T, bin, sluice string, app *backend) string {
	t.Helper()
	base, _ := startCaddyStoppable(t, bin, sluice, app)
	return base
}

// startCaddyStoppable is startCaddy, with a function that stops Caddy
// (SIGTERM: it closes its handlers, so their Limiters return what they
// hold) and waits for it to exit.
func startCaddyStoppable(t *testing.T, bin, sluice string, app *backend) (string, func()) {
	t.Helper()
	data, err := os.ReadFile("Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	s := string(data)
	for from, to := range map[string]string{
		shippedSite:   "http://:" + port + " {",
		shippedSluice: sluice,
		shippedApp:    "reverse_proxy " + app.addr,
	} {
		if !strings.Contains(s, from) {
			t.Fatalf("the shipped Caddyfile does not mention %s", from)
		}
		s = strings.ReplaceAll(s, from, to)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(conf, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir, "SLUICE_CLIENT_TOKEN="+clientToken)
	if out, err := exec.Command(bin, "adapt", "--config", conf, "--adapter", "caddyfile").CombinedOutput(); err != nil {
		t.Fatalf("caddy adapt refused the shipped Caddyfile: %v\n%s", err, out)
	}
	p := start(t, bin, env, "run", "--config", conf, "--adapter", "caddyfile")
	p.waitReady(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "caddy on "+addr)
	return "http://" + addr, p.stop
}

// start runs bin with args and stops it at cleanup (SIGTERM, then kill
// after 10 s), showing its output when the test failed. A process that
// exits early fails the test in waitReady.
func start(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	var logs syncBuffer
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	p := &process{name: filepath.Base(bin), done: done, logs: &logs}
	p.stop = sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			done <- err // for waitReady
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("output of %s %v:\n%s", filepath.Base(bin), args, logs.String())
		}
	})
	return p
}

// process is a started process: done receives its exit; stop ends it
// (SIGTERM, then kill after 10 s) and waits for it, once.
type process struct {
	name string
	done chan error
	logs *syncBuffer
	stop func()
}

// waitReady polls ready until it holds, failing the test when the process
// exits first or after 500 polls 20 ms apart (a real process is being
// waited on: there is no event to wait for).
func (p *process) waitReady(t *testing.T, ready func() bool, what string) {
	t.Helper()
	for i := 0; ; i++ {
		select {
		case err := <-p.done:
			p.done <- err // for the cleanup
			t.Fatalf("%s exited while waiting for %s: %v\n%s", p.name, what, err, p.logs.String())
		default:
		}
		if ready() {
			return
		}
		if i == 500 {
			t.Fatalf("%s not ready after 500 attempts", what)
		}
		time.Sleep(20 * time.Millisecond) // real processes starting (Caddy, sluiced): polled until ready
	}
}

// backend answers "app" and counts the requests it gets.
type backend struct {
	addr string
	n    atomic.Int64
}

func startApp(t *testing.T) *backend {
	t.Helper()
	b := &backend{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.n.Add(1)
		io.WriteString(w, "app")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	b.addr = ln.Addr().String()
	return b
}

func (b *backend) count() int64 { return b.n.Load() }

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type answer struct {
	status int
	hdr    http.Header
	body   string
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

func get(url string, hdr ...string) (answer, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return answer{}, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, hdr: res.Header, body: string(b)}, err
}

// syncBuffer is a bytes.Buffer safe for a process's two writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
