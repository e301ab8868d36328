package rls_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/rls"
	"github.com/sluicehq/sluice/node/rules"
)

// scriptedEngine is an Engine (our seam) whose decisions a test scripts:
// each Decide call answers its items with the next entry of answers and
// records what it was asked.
type scriptedEngine struct {
	answers [][]lease.Decision
	asked   [][]engine.Item
}

func (e *scriptedEngine) SetRLSRules(*rules.Set) {}

func (e *scriptedEngine) Decide(_ context.Context, b *engine.Batch) {
	call := len(e.asked)
	e.asked = append(e.asked, append([]engine.Item(nil), b.Items...))
	for i := range b.Items {
		d := lease.Decision{Allowed: true}
		if call < len(e.answers) && i < len(e.answers[call]) {
			d = e.answers[call][i]
		}
		b.Items[i].Decided, b.Items[i].Decision = true, d
		b.Requests[i].Status = 200
		if !d.Allowed {
			b.Requests[i].Status = 429
		}
	}
}

// TestDrainDenied: a descriptor denied with room left (hits 5, 3 left)
// takes those 3, as envoyproxy/ratelimit's counter goes past the limit;
// one denied with nothing left, or allowed, takes nothing more.
func TestDrainDenied(t *testing.T) {
	e := &scriptedEngine{answers: [][]lease.Decision{{
		{Allowed: false, Remaining: 3, Limit: 10},
		{Allowed: false, Remaining: 0, Limit: 10},
		{Allowed: true, Remaining: 4, Limit: 10},
	}}}
	srv := rls.NewServer(rls.ServerConfig{Engine: e, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	c, err := rls.Parse(rls.Doc{Name: "d.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetConfig(c)
	resp, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 5,
		Descriptors: ds(d1("k=a"), d1("k=b"), d1("k=c"))})
	if err != nil {
		t.Fatal(err)
	}
	if got := codesOf(resp); got != "OVER: OVER OVER OK" {
		t.Fatalf("codes %s", got)
	}
	if len(e.asked) != 2 || len(e.asked[1]) != 1 {
		t.Fatalf("engine calls %v, want the decisions then one drain of one item", e.asked)
	}
	if it := e.asked[1][0]; it.Key != "a" || it.Hits != 3 {
		t.Errorf("drain took %d hits of %q, want 3 of \"a\"", it.Hits, it.Key)
	}
	// Each descriptor was its own request: none refunds another.
	if first := e.asked[0]; len(first) != 3 || first[0].Hits != 5 {
		t.Errorf("first call %v", first)
	}
}

// TestEngineFailures: a Store the rule cannot reach (on_store_failure:
// closed) is UNAVAILABLE, so that Envoy applies its failure_mode_deny; an
// engine error is INTERNAL, its message intact over the wire (grpc-message
// is percent-encoded). Neither panics or answers OK.
func TestEngineFailures(t *testing.T) { eachTransport(t, testEngineFailures) }

func testEngineFailures(t *testing.T, tr rls.Transport) {
	const yml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"
	for _, tc := range []struct {
		name    string
		e       rls.Engine
		code    codes.Code
		message string
	}{
		{"store unavailable", &scriptedEngine{answers: [][]lease.Decision{{{Unavailable: true}}}}, codes.Unavailable,
			"the rate limit store is unavailable (descriptors[0])"},
		{"engine error", failingEngine{"unknown rule 100% \u00e9\n"}, codes.Internal,
			"cannot decide descriptors[0]: unknown rule 100% \u00e9\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, yml, withTransport(tr), withEngine(tc.e))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := r.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: d1("k=a")})
			if st, _ := status.FromError(err); st.Code() != tc.code || st.Message() != tc.message {
				t.Errorf("%v, want %v %q", err, tc.code, tc.message)
			}
		})
	}
}

// failingEngine refuses every request with an error of msg, as the node
// does for a rule it does not know.
type failingEngine struct{ msg string }

func (failingEngine) SetRLSRules(*rules.Set) {}

func (e failingEngine) Decide(_ context.Context, b *engine.Batch) {
	for i := range b.Requests {
		b.Requests[i].Err = errors.New(e.msg)
	}
}

// blockingEngine allows every request, but a request for the key "slow"
// signals started and waits for release.
type blockingEngine struct {
	started chan struct{}
	release chan struct{}
}

func (e *blockingEngine) SetRLSRules(*rules.Set) {}

func (e *blockingEngine) Decide(_ context.Context, b *engine.Batch) {
	for i := range b.Items {
		if b.Items[i].Key == "slow" {
			e.started <- struct{}{}
			<-e.release
		}
		b.Items[i].Decided, b.Items[i].Decision = true, lease.Decision{Allowed: true, Remaining: 1, Limit: 10}
	}
}

// blockedCall starts a rig on tr whose engine blocks, and a call on it
// that is deciding when blockedCall returns: its error comes on slow once
// release lets the engine go on (also at cleanup, before the rig's Close,
// which waits for the call).
func blockedCall(t *testing.T, tr rls.Transport) (r *rig, slow <-chan error, release func()) {
	t.Helper()
	e := &blockingEngine{started: make(chan struct{}), release: make(chan struct{})}
	r = newRig(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n", withTransport(tr), withEngine(e))
	var once sync.Once
	release = func() { once.Do(func() { close(e.release) }) }
	t.Cleanup(release)
	errs := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := r.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: d1("k=slow")})
		errs <- err
	}()
	<-e.started
	return r, errs, release
}

// TestBlockedDecide: a call whose Decide blocks (a Store's first touch, a
// forward) holds up no other call on the same connection.
func TestBlockedDecide(t *testing.T) { eachTransport(t, testBlockedDecide) }

func testBlockedDecide(t *testing.T, tr rls.Transport) {
	r, slow, release := blockedCall(t, tr)
	if got, _ := r.call(t, "d", 0, desc("k=fast")); got != "OK: OK" {
		t.Errorf("the other call: %s", got)
	}
	select {
	case err := <-slow:
		t.Fatalf("the blocked call was answered before its Decide returned: %v", err)
	default:
	}
	release()
	if err := <-slow; err != nil {
		t.Errorf("the blocked call, released: %v", err)
	}
}

// TestCloseLetsCallsFinish: Close stops accepting connections at once,
// lets a call in flight finish and answer, then returns; Serve returns nil.
func TestCloseLetsCallsFinish(t *testing.T) { eachTransport(t, testCloseLetsCallsFinish) }

func testCloseLetsCallsFinish(t *testing.T, tr rls.Transport) {
	r, slow, release := blockedCall(t, tr)
	closed := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r.srv.Close(ctx)
		close(closed)
	}()
	// Close has begun once the listener refuses connections.
	for {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			break
		}
		c.Close()
		runtime.Gosched()
	}
	select {
	case <-closed:
		t.Fatal("Close returned with a call in flight")
	default:
	}
	release()
	if err := <-slow; err != nil {
		t.Errorf("the call in flight: %v", err)
	}
	<-closed
}
