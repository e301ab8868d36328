package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	sluiced "github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rules"
)

// A change of the rules races Allow: once the Limiter has fetched the new
// rules, every Allow that starts after decides by them (or fails, for a
// rule that is gone), never by the old ones, on the fast path (a leased
// key) as on the slow one (a key of a rule with overrides). Each version
// of rule "r" has its own limit, so a Decision's Limit tells the version
// that decided it.
func TestLimiterFollowsRulesRacingAllow(t *testing.T) {
	versions := []string{
		"limit: 1000",
		"limit: 2000",
		"limit: 3000\n    shadow: true",
		"limit: 4000\n    overrides:\n      - {key: \"nobody-*\", limit: 1}",
		"", // r is gone
	}
	clk := clocktest.New()
	mem := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clk.Now, SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
	mcfg := lease.DefaultConfig()
	mcfg.Now = clk.Now
	mcfg.SweepInterval = -1
	mcfg.StoreTimeout = time.Minute // a loaded machine must not make the Store look failed
	mgr := lease.NewManager(mem, mcfg)
	cfg := sluiced.DefaultConfig()
	cfg.ClientToken = modelToken
	cfg.ClientRate = 1 << 30
	n := sluiced.New(cfg, mgr)
	setRules := func(v string) {
		yml := "rules:\n  - name: other\n    algorithm: token_bucket\n    limit: 10\n    period: 1h\n"
		if v != "" {
			yml += "  - name: r\n    algorithm: token_bucket\n    period: 1h\n    " + v + "\n"
		}
		set, err := rules.Parse([]byte(yml))
		if err != nil {
			t.Fatalf("rules %q: %v", yml, err)
		}
		n.SetRules(set)
	}
	setRules(versions[0])
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	t.Cleanup(func() { _ = n.Shutdown(context.Background()); <-served; mgr.Close() })
	lcfg := LimiterConfig{Nodes: []string{ln.Addr().String()}, Token: modelToken, Timeout: time.Minute, RulesPoll: time.Hour}
	lcfg.Lease.Now = clk.Now
	lcfg.Lease.SweepInterval = -1
	l, err := NewLimiter(lcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })

	const goroutines, perVersion = 4, 20
	var (
		gen      atomic.Int64 // the version the Limiter has at least
		next     atomic.Int64 // the version the node has: the Limiter's at most
		stop     atomic.Bool
		progress = make(chan struct{}, goroutines*len(versions)) // a goroutine made perVersion calls at a version
		wg       sync.WaitGroup
		errMu    sync.Mutex
		errs     []error
	)
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
	for range goroutines {
		wg.Go(func() {
			last, count := int64(-1), 0
			for i := 0; !stop.Load(); i++ {
				v := gen.Load()
				d, err := l.Allow(context.Background(), "r", fmt.Sprintf("k%d", i%8), 1)
				upto := next.Load()
				if v != last {
					last, count = v, 0
				}
				if count++; count == perVersion {
					progress <- struct{}{}
				}
				removed := int64(len(versions) - 1)
				switch used := d.Limit/1000 - 1; { // the version that decided
				case errors.Is(err, ErrUnknownRule) && upto == removed:
				case err != nil:
					fail(fmt.Errorf("an Allow started with version %d: %v", v, err))
				case used < v || used > upto || used >= removed || d.Shadow != (used == 2):
					fail(fmt.Errorf("an Allow started with version %d (of %d) decided by version %d: %+v", v, upto, used, d))
				}
			}
		})
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() }) // before the Limiter closes, if the test fails early
	waitProgress := func() {                          // every goroutine decided under the version in force
		for range goroutines {
			<-progress
		}
	}
	for v := 1; v < len(versions); v++ {
		waitProgress()
		next.Store(int64(v))
		setRules(versions[v])
		if err := l.refreshRules(t.Context()); err != nil {
			t.Fatal(err)
		}
		gen.Store(int64(v))
	}
	waitProgress()
	stop.Store(true)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs[:min(len(errs), 5)]...))
	}
}
