package main

// The node rows of the fault table of docs/faults.md: three sluiced
// processes (default settings, one Redis) under a paced, bounded HTTP load
// sent to two of them, while the third, which owns the limit key and a
// third of the other keys, is killed (SIGKILL) or stopped (SIGSTOP) for 5 s,
// or while Redis is killed or paused for 5 s (the Redis rows of lua's
// TestFault again, measured on HTTP answers).
// Each row is one subtest that prints its figures with -v, for example
//
//	go test -count=1 -run 'TestFault/node-sigkill' -v ./cmd/sluiced/
//
// They take about 10–20 s each, so they run only when -run names TestFault
// or SLUICE_FAULTS=1 is set. What must hold whatever the machine's load is
// asserted (every check answered, no 5xx for the local rules except shed
// checks, counted apart, at most one window over the limit, the cluster
// back within a generous bound); the figures are logged. overload-x2 also
// asserts issue 11's acceptance, the limit key admitted within [97%, 100%]
// of the allowance, which a swamped machine can fail (late answers waste
// tokens): it stays out of make test.

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/pace"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/lua/redistest"
	"github.com/sluicehq/sluice/node/member"
	"github.com/sluicehq/sluice/shard"
)

func faultsWanted() bool {
	if os.Getenv("SLUICE_FAULTS") == "1" {
		return true
	}
	f := flag.Lookup("test.run")
	return f != nil && strings.Contains(f.Value.String(), "TestFault")
}

const faultRules = `rules:
  - name: lim
    algorithm: token_bucket
    limit: 100
    period: 1s
  - name: fresh
    algorithm: token_bucket
    limit: 1000000000
    period: 1s
`

const (
	faultWorkers  = 8
	faultPairs    = 200 // pairs of checks per second: one fresh key, one limit key
	limRate       = 100 // the lim rule's limit per second (and burst)
	maxFaultRun   = 90 * time.Second
	recoveryBound = 60 * time.Second
	faultBudget   = 20 * time.Millisecond // sluiced's default -check-budget
)

// nodeLoad sends paced checks to the given nodes.
type nodeLoad struct {
	t      *testing.T
	client *http.Client
	load   *pace.Load     // the paced load (nil for overload's open loop)
	wg     sync.WaitGroup // overload's open-loop senders

	issued, answered, fivexx, degraded atomic.Int64
	// shed: 503 answers with a check body (allowed false, Retry-After):
	// the key's owner, alive, did not answer in time. A local rule
	// answers no other 503 with a check body.
	shed                        atomic.Int64
	admitted, firstLim, lastLim atomic.Int64
	phase                       atomic.Int32
	maxLat                      [3]atomic.Int64
	seq                         atomic.Int64
}

// startNodeLoad starts workers that each send a pair of checks (a fresh
// key, then the limit key) to the targets in turn, pairs per second in all
// (0: as fast as answers come), until Stop and at most maxFaultRun.
func startNodeLoad(t *testing.T, targets []*daemonProc, limKey string, workers, pairs int) *nodeLoad {
	l := &nodeLoad{
		t:      t,
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2 * workers}},
	}
	l.load = pace.Start(pace.Config{Workers: workers, Rate: float64(pairs), Max: maxFaultRun}, func(w, i int) {
		target := targets[(w+i)%len(targets)]
		l.check(target, "fresh", "f-"+strconv.FormatInt(l.seq.Add(1), 10), false)
		l.check(target, "lim", limKey, true)
	})
	t.Cleanup(l.Stop)
	return l
}

func (l *nodeLoad) check(p *daemonProc, rule, key string, lim bool) {
	l.issued.Add(1)
	start := time.Now()
	res, err := l.client.Post(p.http+"/v1/check", "application/json",
		strings.NewReader(`{"rule":"`+rule+`","key":"`+key+`"}`))
	if err != nil {
		return // not answered
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	done := time.Now()
	if err != nil {
		return
	}
	l.answered.Add(1)
	a := &l.maxLat[l.phase.Load()]
	for v := int64(done.Sub(start)); ; {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			break
		}
	}
	var d struct {
		Degraded bool
		Allowed  *bool
	}
	_ = json.Unmarshal(body, &d)
	switch {
	case res.StatusCode == http.StatusServiceUnavailable && d.Allowed != nil && !*d.Allowed && res.Header.Get("Retry-After") != "":
		l.shed.Add(1)
	case res.StatusCode >= 500:
		l.fivexx.Add(1)
		l.t.Logf("%s %s/%s: %d %s", p.http, rule, key, res.StatusCode, body)
	}
	if d.Degraded {
		l.degraded.Add(1)
	}
	if lim {
		l.firstLim.CompareAndSwap(0, start.UnixNano())
		for v := done.UnixNano(); ; {
			old := l.lastLim.Load()
			if v <= old || l.lastLim.CompareAndSwap(old, v) {
				break
			}
		}
		if res.StatusCode == http.StatusOK {
			l.admitted.Add(1)
		}
	}
}

func (l *nodeLoad) Stop() {
	if l.load != nil {
		l.load.Stop()
	}
	l.wg.Wait()
}

func (l *nodeLoad) waitChecks(n int64) {
	l.t.Helper()
	target := l.answered.Load() + n
	clocktest.Eventually(l.t, recoveryBound, fmt.Sprintf("%d checks answered", n), func() bool { return l.answered.Load() >= target })
}

// report stops the load, logs the row and asserts what must hold. It
// returns the limit key's admitted checks and the allowance.
func (l *nodeLoad) report(name string, recovery time.Duration) (admitted, allowance int64) {
	t := l.t
	t.Helper()
	l.Stop()
	elapsed := time.Duration(l.lastLim.Load() - l.firstLim.Load())
	allowance = int64(limRate) + int64(limRate*elapsed.Seconds())
	base, fault := time.Duration(l.maxLat[0].Load()), time.Duration(max(l.maxLat[1].Load(), l.maxLat[2].Load()))
	added := max(fault-base, 0)
	issued, answered := l.issued.Load(), l.answered.Load()
	admitted = l.admitted.Load()
	t.Logf("fault row: | %s | %d of %d | %d | +%s (max %s, baseline max %s) | %d of %d allowed (%.1f%%) | %s |",
		name, answered, issued, l.fivexx.Load(), msec(added), msec(fault), msec(base),
		admitted, allowance, 100*float64(admitted)/float64(allowance), msec(recovery))
	t.Logf("%d answers degraded, %d shed (503 with Retry-After: the owner did not answer in time)", l.degraded.Load(), l.shed.Load())
	// Reported, not asserted: a loaded machine adds delays of its own.
	verdict := "within"
	if added > faultBudget+5*time.Millisecond {
		verdict = "OVER"
	}
	t.Logf("max added latency +%s: %s the check budget %s + 5 ms", msec(added), verdict, msec(faultBudget))
	if answered != issued {
		t.Errorf("%d of %d checks answered", answered, issued)
	}
	if n := l.fivexx.Load(); n != 0 {
		t.Errorf("%d answers 5xx for local rules, not counting those shed", n)
	}
	if excess := admitted - allowance; excess > limRate {
		t.Errorf("admitted %d of %d allowed: %d over, more than one window (%d)", admitted, allowance, excess, limRate)
	}
	return admitted, allowance
}

func msec(d time.Duration) string {
	if d >= time.Second {
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

// memberStates is p's /v1/members as name → state, and "ring" → the
// members its ring routes to, comma-separated (nil when unreachable).
func memberStates(p *daemonProc) (map[string]string, int) {
	c := http.Client{Timeout: 2 * time.Second}
	res, err := c.Get(p.http + "/v1/members")
	if err != nil {
		return nil, 0
	}
	defer res.Body.Close()
	var body struct {
		Vnodes  int
		Members []struct{ Name, State string }
		Ring    []string
	}
	if json.NewDecoder(res.Body).Decode(&body) != nil {
		return nil, 0
	}
	out := map[string]string{}
	for _, m := range body.Members {
		out[m.Name] = m.State
	}
	out["ring"] = strings.Join(body.Ring, ",")
	return out, body.Vnodes
}

// TestFault: node-sigkill and node-sigstop, one sluiced process failing
// under load among three.
func TestFault(t *testing.T) {
	if !faultsWanted() {
		t.Skip("fault rows run when -run names TestFault or SLUICE_FAULTS=1 (see docs/faults.md)")
	}
	bin := buildSluiced(t)
	survivorsSee := func(want func(states map[string]string) bool) func(a, b *daemonProc) bool {
		return func(a, b *daemonProc) bool {
			sa, _ := memberStates(a)
			sb, _ := memberStates(b)
			return want(sa) && want(sb)
		}
	}
	storeClosed := func(a, b *daemonProc) bool {
		return storeState(a) == "closed" && storeState(b) == "closed"
	}
	for _, row := range []struct {
		name string
		// fault breaks c or Redis, and returns when the fault ends. Its
		// time.Sleep is the fault's length: a real process (sluiced or
		// redis-server) stays down that long, in real time, while the
		// paced load measures it.
		fault func(c *daemonProc, redis *redistest.Server)
		// back reports whether a and b are whole again.
		back func(a, b *daemonProc) bool
	}{
		{"node-sigkill", func(c *daemonProc, _ *redistest.Server) { _ = c.cmd.Process.Kill() },
			survivorsSee(func(s map[string]string) bool { return s["c"] != "" && s["c"] != member.StateAlive })},
		{"node-sigstop", func(c *daemonProc, _ *redistest.Server) {
			_ = c.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(5 * time.Second) // the fault lasts this long (real time)
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
		}, survivorsSee(func(s map[string]string) bool { return s["c"] == member.StateAlive })},
		// The Redis rows again, end to end: HTTP answers of three nodes.
		{"sluiced-redis-kill", func(_ *daemonProc, redis *redistest.Server) {
			redis.Kill()
			time.Sleep(5 * time.Second) // the fault lasts this long (real time)
			redis.Restart()
		}, storeClosed},
		{"sluiced-redis-pause-5s", func(_ *daemonProc, redis *redistest.Server) {
			redis.Pause()
			time.Sleep(5 * time.Second) // the fault lasts this long (real time)
			redis.Resume()
		}, storeClosed},
	} {
		t.Run(row.name, func(t *testing.T) {
			a, b, c, redis, limKey := startFaultCluster(t, bin)
			l := startNodeLoad(t, []*daemonProc{a, b}, limKey, faultWorkers, faultPairs)
			l.waitChecks(2 * faultPairs)

			l.phase.Store(1)
			row.fault(c, redis)
			healed := time.Now()
			clocktest.Eventually(t, recoveryBound, "a and b whole again", func() bool { return row.back(a, b) })
			recovery := time.Since(healed)
			l.phase.Store(2)
			l.waitChecks(2 * faultPairs)
			admitted, allowance := l.report(row.name, recovery)
			if row.name == "node-sigstop" {
				silentOwner(t, admitted, allowance, l.shed.Load())
			}
		})
	}
	t.Run("overload-x2", func(t *testing.T) { overload(t, bin) })
}

// silentOwner asserts what the node-sigstop row promises: a stopped owner
// is routed around (its keys leased from the shared Store by the others)
// within about a second, so the limit key still admits at least 90% of the
// allowance and at most a second of c's checks is shed. c owns the limit
// key (faultPairs checks a second) and about a third of the fresh keys: a
// second of its checks is 4/3 × faultPairs. Loose enough for a loaded
// machine; without demotion c's checks were shed for the whole 5 s (447
// shed, 47% of the allowance).
func silentOwner(t *testing.T, admitted, allowance, shed int64) {
	t.Helper()
	if pct := 100 * float64(admitted) / float64(allowance); pct < 90 {
		t.Errorf("the stopped owner's limit key admitted %d of %d allowed (%.1f%%), want at least 90%%", admitted, allowance, pct)
	}
	if second := int64(faultPairs * 4 / 3); shed > second {
		t.Errorf("%d checks shed while the owner was stopped, want at most a second of its checks (%d)", shed, second)
	}
}

// storeState is the Store breaker's state in p's /readyz ("" when
// unreachable).
func storeState(p *daemonProc) string {
	c := http.Client{Timeout: 2 * time.Second}
	res, err := c.Get(p.http + "/readyz")
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	var body struct{ Store struct{ State string } }
	if json.NewDecoder(res.Body).Decode(&body) != nil {
		return ""
	}
	return body.Store.State
}

// startFaultCluster starts three sluiced processes a, b, c on one Redis,
// waits until each sees the three alive, and returns them, the Redis and a
// key of the lim rule that c owns.
func startFaultCluster(t *testing.T, bin string) (a, b, c *daemonProc, redis *redistest.Server, limKey string) {
	t.Helper()
	redis = redistest.StartServer(t)
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	writeFile(t, rulesPath, faultRules)
	const key = "MDEyMzQ1Njc4OWFiY2RlZg=="
	common := []string{"-listen", "127.0.0.1:0", "-rules", rulesPath, "-redis", redis.Addr,
		"-gossip", "127.0.0.1:0", "-cluster-key", key}
	a = startDaemon(t, bin, true, append(common, "-node-name", "a")...)
	b = startDaemon(t, bin, true, append(common, "-node-name", "b", "-join", a.gossip)...)
	c = startDaemon(t, bin, true, append(common, "-node-name", "c", "-join", a.gossip)...)
	var vnodes int
	clocktest.Eventually(t, recoveryBound, "three nodes alive on each, and routed to", func() bool {
		for _, p := range []*daemonProc{a, b, c} {
			s, v := memberStates(p)
			if s["a"] != member.StateAlive || s["b"] != member.StateAlive || s["c"] != member.StateAlive || s["ring"] != "a,b,c" {
				return false
			}
			vnodes = v
		}
		return true
	})
	ring := shard.NewRing([]string{"a", "b", "c"}, vnodes)
	for i := 0; limKey == ""; i++ {
		if k := "k-" + strconv.Itoa(i); ring.Owner("lim:"+k) == "c" {
			limKey = k
		}
	}
	return a, b, c, redis, limKey
}

// overload is the overload-x2 row: the saturation of three nodes is
// measured with 256 connections sending as fast as answers come (3 s),
// then pairs of checks arrive open-loop at that rate (twice the checks)
// for 5 s, each sent at once; an arrival that finds 1024 pairs in flight
// is dropped by the generator and counted. The load generator shares the
// machine with the nodes and Redis. Saturation counts decided checks, not
// shed ones (fast 503s).
func overload(t *testing.T, bin string) {
	a, b, c, _, limKey := startFaultCluster(t, bin)
	nodes := []*daemonProc{a, b, c}

	sat := startNodeLoad(t, nodes, limKey+"-sat", 256, 0)
	sat.waitChecks(1000)
	// Saturation is what the nodes decide: shed answers (fast 503s) are
	// not counted.
	decided := func() int64 { return sat.answered.Load() - sat.shed.Load() }
	n0, t0 := decided(), time.Now()
	time.Sleep(3 * time.Second) // the measuring window: real processes at full load, in real time
	n1, t1 := decided(), time.Now()
	sat.Stop()
	rate := float64(n1-n0) / t1.Sub(t0).Seconds()
	t.Logf("saturation: %.0f checks/s decided by three nodes (256 connections, closed loop; %d shed; max latency %s)", rate, sat.shed.Load(), msec(time.Duration(sat.maxLat[0].Load())))

	// Open loop: pairs arrive at the saturation rate (two checks each:
	// twice the saturation) for 5 s, each sent at once on its own
	// goroutine; an arrival that finds 1024 pairs in flight is dropped by
	// the generator (counted, not sent), so the loop stays bounded.
	l := &nodeLoad{t: t,
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}}
	l.maxLat[0].Store(sat.maxLat[0].Load()) // baseline: the latency at saturation
	l.phase.Store(1)
	slots := make(chan struct{}, 1024)
	var dropped, arrivals int64
	o0 := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	for now := range tick.C {
		el := now.Sub(o0)
		if el > 5*time.Second {
			break
		}
		for due := int64(rate * el.Seconds()); arrivals < due; arrivals++ {
			select {
			case slots <- struct{}{}:
				l.wg.Add(1)
				go func(i int64) {
					defer func() { <-slots; l.wg.Done() }()
					p := nodes[i%int64(len(nodes))]
					l.check(p, "fresh", "o-"+strconv.FormatInt(i, 10), false)
					l.check(p, "lim", limKey, true)
				}(arrivals)
			default:
				dropped++
			}
		}
	}
	tick.Stop()
	offered := 2 * float64(arrivals) / time.Since(o0).Seconds()
	l.Stop()
	t.Logf("offered %.0f checks/s (%.1f× the saturation); %d of %d pairs dropped by the generator (1024 in flight)", offered, offered/rate, dropped, arrivals)
	ended := time.Now()
	// Recovery: every node answers a check again once the overload ends.
	for _, p := range nodes {
		clocktest.Eventually(t, recoveryBound, "a check answered after the overload", func() bool {
			res, err := http.Post(p.http+"/v1/check", "application/json", strings.NewReader(`{"rule":"fresh","key":"after"}`))
			if err != nil {
				return false
			}
			res.Body.Close()
			return res.StatusCode == http.StatusOK
		})
	}
	recovery := time.Since(ended)
	for _, p := range nodes {
		t.Logf("%s: %s", p.http, metricLines(p, "sluice_store_calls_total", "sluice_forward_failed_requests_total",
			"sluice_routed_items_total", "sluice_store_breaker_transitions_total", `rule="lim"`, "sluice_forward_rejected_requests_total", "sluice_forward_late_refunded_items_total"))
	}
	// Issue 11's acceptance: overload must not turn into mis-admission.
	// Only the owner decides the limit key (a forward that fails under
	// load is shed, not decided by the sender), so nothing beyond the
	// allowance is admitted, and little below it.
	admitted, allowance := l.report("overload-x2", recovery)
	if lo, hi := allowance*97/100, allowance; admitted < lo || admitted > hi {
		t.Errorf("admitted %d of %d allowed (%.1f%%), want within [97%%, 100%%]", admitted, allowance, 100*float64(admitted)/float64(allowance))
	}
}

// metricLines returns p's /metrics lines that hold one of the strings,
// joined by "; " (for the log).
func metricLines(p *daemonProc, subs ...string) string {
	c := http.Client{Timeout: 2 * time.Second}
	res, err := c.Get(p.http + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#") || strings.HasSuffix(line, " 0") {
			continue
		}
		for _, s := range subs {
			if strings.Contains(line, s) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "; ")
}
