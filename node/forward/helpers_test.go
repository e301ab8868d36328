package forward

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/shard"
)

// echoDecider is a Decider whose answers are a function of the item, so
// that a test can tell every result belongs to its item: Limit = hits,
// Remaining = the number in the key after "k" (or -1), Allowed when hits
// ≤ 5, and an error for rule "bad". It records the batch sizes it saw.
type echoDecider struct {
	plans []shard.Plan // returned with every batch

	mu struct {
		sync.Mutex
		sizes []int
	}
}

func (d *echoDecider) DecideBatch(items []Item, results []Result) []shard.Plan {
	d.mu.Lock()
	d.mu.sizes = append(d.mu.sizes, len(items))
	d.mu.Unlock()
	for i := range items {
		results[i] = want(items[i])
	}
	return d.plans
}

func (d *echoDecider) sizes() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int(nil), d.mu.sizes...)
}

// want is echoDecider's answer to it.
func want(it Item) Result {
	if it.Rule == "bad" {
		return Result{Error: "unknown rule " + strconv.Quote(it.Rule)}
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(it.Key, "k"), 10, 64)
	if err != nil {
		n = -1
	}
	return Result{
		Allowed:      it.Hits <= 5,
		Limit:        it.Hits,
		Remaining:    n,
		ResetMS:      int64(len(it.Rule)),
		RetryAfterMS: int64(it.Op),
		Degraded:     it.Op == OpRefund,
	}
}

// server is a real fasthttp server on a loopback port.
type server struct {
	addr     string
	requests atomic.Int64
}

// startServer serves h on 127.0.0.1 until the test ends, counting
// requests.
func startServer(t testing.TB, h fasthttp.RequestHandler) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: ln.Addr().String()}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			s.requests.Add(1)
			h(ctx)
		},
		MaxRequestBodySize: MaxBodyBytes,
		IdleTimeout:        time.Minute,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Shutdown()
		<-done
	})
	return s
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// newForwarder returns a Forwarder closed when the test ends, after
// which the test checks that none of its goroutines is left. A zero
// Timeout becomes 5s: the machine running the tests may be loaded enough
// to make a loopback request take more than the default 50ms, and only
// the tests of timeouts should see one.
func newForwarder(t testing.TB, cfg Config) *Forwarder {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	f := New(cfg)
	t.Cleanup(func() {
		var peers []*peer
		for _, p := range *f.peers.Load() {
			peers = append(peers, p)
		}
		f.Close()
		noOwnGoroutines(t, peers...)
	})
	return f
}

// noOwnGoroutines waits until no goroutine runs the collector or a sender
// of peers (of any peer if none is given): one that has called wg.Done is
// still on its way out. It fails t with their stacks after 10s.
func noOwnGoroutines(t testing.TB, peers ...*peer) {
	t.Helper()
	clocktest.EventuallyState(t, 10*time.Second, "the peers' goroutines to end", func() (bool, string) {
		g := ownGoroutinesNow(peers)
		return g == "", "still running:\n" + g
	})
}

func ownGoroutinesNow(peers []*peer) string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if len(peers) == 0 && strings.Contains(g, "forward.(*peer)") {
			left = append(left, g)
		}
		for _, p := range peers {
			if strings.Contains(g, fmt.Sprintf("forward.(*peer).collect(%p", p)) ||
				strings.Contains(g, fmt.Sprintf("forward.(*peer).send(%p", p)) {
				left = append(left, g)
			}
		}
	}
	return strings.Join(left, "\n\n")
}

func isUnavailable(err error) bool { return errors.Is(err, ErrPeerUnavailable) }

func isBusy(err error) bool { return errors.Is(err, ErrPeerBusy) }
