package lua

// The load harness of the fault tests (failover_test.go, fault_test.go): one
// lease.Manager over a real Store, driven by a paced, bounded load loop
// while a test breaks Redis, measuring what the fault table of
// docs/faults.md reports.

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/pace"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
)

// Load shape: pairs of checks per second, each pair one check of a fresh
// key (a Store call every time while the Store answers: the worst case for
// a fault) and one of the limit key, checked at twice its rate.
const (
	faultWorkers = 4
	faultPairs   = 200 // pairs per second, all workers together
	limRate      = 100 // the limit key's limit per second (and burst)
	// maxFaultRun bounds a load loop whatever the test does.
	maxFaultRun = 90 * time.Second
	// recoveryBound is the generous bound on recovery that the tests
	// assert: the figures are logged, not asserted.
	recoveryBound = 60 * time.Second
)

// faultLoad drives one Manager; see startFaultLoad.
type faultLoad struct {
	t      *testing.T
	m      *lease.Manager
	fresh  func(i int64) string
	limKey string
	lim    lease.Policy
	hot    lease.Policy

	load *pace.Load

	seq       atomic.Int64 // fresh keys handed out
	issued    atomic.Int64 // checks started
	answered  atomic.Int64 // checks that returned a decision
	failed    atomic.Int64 // checks that returned an error
	local5xx  atomic.Int64 // Unavailable decisions of local rules: a 503
	degraded  atomic.Int64 // decisions from node memory
	admitted  atomic.Int64 // allowed checks of the limit key
	firstLim  atomic.Int64 // unix nanos of the first limit-key check
	lastLim   atomic.Int64 // unix nanos of the end of the last one
	phase     atomic.Int32 // 0 baseline, 1 fault until recovered, 2 after
	maxLat    [3]atomic.Int64
	healAt    atomic.Int64 // unix nanos: when the fault ended
	recovered atomic.Int64 // unix nanos: first Store decision started after healAt
}

// startFaultLoad starts the load on m: fresh(i) names the i-th fresh
// counter key; limKey is the limit key. Both use on_store_failure local.
// The load runs until stop (called in t.Cleanup too) and at most
// maxFaultRun.
func startFaultLoad(t *testing.T, m *lease.Manager, fresh func(i int64) string, limKey string) *faultLoad {
	l := &faultLoad{
		t: t, m: m, fresh: fresh, limKey: limKey,
		lim: lease.Policy{Algorithm: lease.TokenBucket, Limit: limRate, Period: time.Second, OnFailure: lease.FailLocal},
		hot: lease.Policy{Algorithm: lease.TokenBucket, Limit: 1 << 30, Period: time.Second, OnFailure: lease.FailLocal},
	}
	l.load = pace.Start(pace.Config{Workers: faultWorkers, Rate: faultPairs, Max: maxFaultRun}, func(int, int) {
		l.check(l.fresh(l.seq.Add(1)), l.hot, true)
		l.check(l.limKey, l.lim, false)
	})
	t.Cleanup(l.Stop)
	return l
}

func (l *faultLoad) check(key string, p lease.Policy, fresh bool) {
	l.issued.Add(1)
	start := time.Now()
	d, err := l.m.Take(key, p, 1)
	done := time.Now()
	if err != nil {
		l.failed.Add(1)
		l.t.Errorf("Take(%s): %v", key, err)
		return
	}
	l.answered.Add(1)
	ph := l.phase.Load()
	atomicMax(&l.maxLat[ph], int64(done.Sub(start)))
	if d.Unavailable {
		l.local5xx.Add(1)
	}
	if d.Degraded {
		l.degraded.Add(1)
	}
	if fresh && !d.Degraded && !d.Unavailable {
		if h := l.healAt.Load(); h != 0 && start.UnixNano() > h {
			l.recovered.CompareAndSwap(0, done.UnixNano())
		}
	}
	if !fresh {
		l.firstLim.CompareAndSwap(0, start.UnixNano())
		atomicMax(&l.lastLim, done.UnixNano())
		if d.Allowed {
			l.admitted.Add(1)
		}
	}
}

func atomicMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// Stop ends the load and waits for its workers. It is idempotent.
func (l *faultLoad) Stop() { l.load.Stop() }

// waitChecks waits until n more checks have been answered (the load is
// running and warm), bounded by recoveryBound.
func (l *faultLoad) waitChecks(n int64) {
	l.t.Helper()
	target := l.answered.Load() + n
	clocktest.Eventually(l.t, recoveryBound, fmt.Sprintf("%d checks answered", n), func() bool { return l.answered.Load() >= target })
}

// Inject marks the start of the fault (latencies from now on count as
// the fault's).
func (l *faultLoad) Inject() { l.phase.Store(1) }

// Heal marks the end of the fault: recovery is measured from now.
func (l *faultLoad) Heal() { l.healAt.Store(time.Now().UnixNano()) }

// WaitRecovered waits until a check that started after Heal was decided by
// the Store again, and returns how long that took; then the load runs
// another second's worth of checks to show it stays recovered.
func (l *faultLoad) WaitRecovered() time.Duration {
	l.t.Helper()
	clocktest.Eventually(l.t, recoveryBound, "checks decided by the Store again", func() bool { return l.recovered.Load() != 0 })
	l.phase.Store(2)
	l.waitChecks(2 * faultPairs)
	return time.Duration(l.recovered.Load() - l.healAt.Load())
}

// faultRow is one row of the fault table of docs/faults.md.
type faultRow struct {
	name                     string
	issued, answered, local5 int64
	degraded                 int64
	baseMax, faultMax        time.Duration
	admitted, allowance      int64
	recovery                 time.Duration
	// budget is the Manager's check budget (0: none): the most a fault
	// should add to a check, plus the node's own work. Reported, not
	// asserted: a loaded machine adds its own delays.
	budget time.Duration
}

// Row stops the load and returns its figures.
func (l *faultLoad) Row(name string, recovery time.Duration) faultRow {
	l.Stop()
	elapsed := time.Duration(l.lastLim.Load() - l.firstLim.Load())
	return faultRow{
		name:     name,
		issued:   l.issued.Load(),
		answered: l.answered.Load(),
		local5:   l.local5xx.Load(),
		degraded: l.degraded.Load(),
		baseMax:  time.Duration(l.maxLat[0].Load()),
		faultMax: time.Duration(max(l.maxLat[1].Load(), l.maxLat[2].Load())),
		admitted: l.admitted.Load(),
		// Token bucket: the burst, plus the rate over the time checked.
		allowance: l.lim.Capacity() + int64(float64(limRate)*elapsed.Seconds()),
		recovery:  recovery,
	}
}

// check asserts what must hold whatever the machine's load: every check
// answered, no 503 for a local rule, at most one window (the capacity)
// over the limit (the failover loss the accuracy contract allows), and
// prints the row.
func (r faultRow) check(t *testing.T) {
	t.Helper()
	added := r.faultMax - r.baseMax
	if added < 0 {
		added = 0
	}
	t.Logf("fault row: | %s | %d of %d | %d | +%s (max %s, baseline max %s) | %d of %d allowed (%.1f%%) | %s |",
		r.name, r.answered, r.issued, r.local5, ms(added), ms(r.faultMax), ms(r.baseMax),
		r.admitted, r.allowance, 100*float64(r.admitted)/float64(r.allowance), ms(r.recovery))
	t.Logf("%d of the checks decided from node memory (degraded)", r.degraded)
	if r.budget > 0 {
		verdict := "within"
		if added > r.budget+5*time.Millisecond {
			verdict = "OVER"
		}
		t.Logf("max added latency +%s: %s the check budget %s + 5 ms", ms(added), verdict, ms(r.budget))
	}
	if r.answered != r.issued {
		t.Errorf("%d of %d checks answered", r.answered, r.issued)
	}
	if r.local5 != 0 {
		t.Errorf("%d checks of local rules answered unavailable (a 503)", r.local5)
	}
	if excess := r.admitted - r.allowance; excess > limRate {
		t.Errorf("admitted %d of %d allowed: %d over, more than one window (%d)", r.admitted, r.allowance, excess, limRate)
	}
}

func ms(d time.Duration) string {
	if d >= time.Second {
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

// delayProxy is a TCP proxy on loopback that delays what the client sends
// by a settable amount, in order: each round trip through it takes that much
// longer. It stands between a Store and redis-server.
type delayProxy struct {
	Addr  string
	delay atomic.Int64 // nanoseconds
	ln    net.Listener
	mu    sync.Mutex // protects conns
	conns []net.Conn
	wg    sync.WaitGroup
}

func startDelayProxy(t *testing.T, upstream string) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{Addr: ln.Addr().String(), ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); p.pipe(u, c, true) }()
			go func() { defer p.wg.Done(); p.pipe(c, u, false) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// SetDelay sets the delay added to what clients send from now on.
func (p *delayProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst; with delayed, each chunk is written the proxy's
// delay after it was read (chunks stay in order).
func (p *delayProxy) pipe(dst, src net.Conn, delayed bool) {
	defer dst.Close()
	if !delayed {
		_, _ = io.Copy(dst, src)
		return
	}
	ch := make(chan chunk, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range ch {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d) // the delay the proxy adds: real time, as a slow network's
			}
			if _, err := dst.Write(c.b); err != nil {
				for range ch { // drain until the reader ends
				}
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			ch <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(time.Duration(p.delay.Load()))}
		}
		if err != nil {
			break
		}
	}
	close(ch)
	<-done
}
