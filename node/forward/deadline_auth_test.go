package forward

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestEditedDeadlineRefused: a party on the path moves one signed
// request's DeadlineHeader 4.5 s later. Were the deadline trusted, that
// request would become its sender's reference (the smallest offset) and
// the owner would answer every honest request of the sender "late, not
// decided" (503) for 10–20 s. The owner refuses the edited request as a
// bad signature and goes on deciding the honest ones.
func TestEditedDeadlineRefused(t *testing.T) {
	d := &echoDecider{}
	owner := NewHandler(HandlerConfig{ClusterKey: testKey}, d)
	var edit atomic.Bool
	edit.Store(true)
	s := startServer(t, func(ctx *fasthttp.RequestCtx) {
		if edit.CompareAndSwap(true, false) {
			sent, budget, ok := parseDeadline(ctx.Request.Header.Peek(DeadlineHeader))
			if !ok {
				t.Errorf("the forwarder sent no deadline: %q", ctx.Request.Header.Peek(DeadlineHeader))
			}
			ctx.Request.Header.Set(DeadlineHeader, strconv.FormatInt(sent+4_500_000, 10)+"."+strconv.FormatInt(budget, 10))
		}
		owner(ctx)
	})
	// Backoff 1ns: the refused request does not keep the peer down for
	// the honest ones. A 1s timeout is far below the 4.5 s edit.
	f := newForwarder(t, Config{ClusterKey: testKey, Self: "a", Timeout: time.Second, Backoff: time.Nanosecond})
	it := Item{Op: OpCheck, Rule: "r", Key: "k1", Hits: 1}
	_, err := f.Forward(context.Background(), s.addr, it)
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), DeadlineAuthHeader) {
		t.Fatalf("the edited request: %v, want 401 naming %s", err, DeadlineAuthHeader)
	}
	if n := len(d.sizes()); n != 0 {
		t.Fatalf("the edited request was decided (%d batches)", n)
	}
	for i := range 5 {
		r, err := f.Forward(context.Background(), s.addr, it)
		if err != nil || r != want(it) {
			t.Fatalf("honest request %d: %+v, %v; want it decided", i, r, err)
		}
	}
}

// TestDeadlineAuth: with a cluster key the owner uses a request's
// deadline only when DeadlineAuthHeader signs it for that request's
// nonce; a request without DeadlineAuthHeader (a sender of the previous
// release, during a rolling upgrade) is decided as if it had no deadline.
func TestDeadlineAuth(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	d := &echoDecider{}
	h := NewHandler(HandlerConfig{ClusterKey: testKey, Now: func() time.Time { return now }}, d)
	sig := newSigner(testKey)
	body, _ := AppendBatch(nil, []Item{{Op: OpCheck, Rule: "r", Key: "k1", Hits: 1}})
	type req struct {
		deadline string // DeadlineHeader, "" for none
		auth     func(nonce *[NonceLen]byte, dl string) string
	}
	signed := func(nonce *[NonceLen]byte, dl string) string {
		return string(sig.appendDeadlineAuth(nil, nonce, []byte(dl)))
	}
	otherNonce := func(_ *[NonceLen]byte, dl string) string {
		n := newNonce()
		return string(sig.appendDeadlineAuth(nil, &n, []byte(dl)))
	}
	send := func(r req) (int, string) {
		var ctx fasthttp.RequestCtx
		nonce := newNonce()
		ctx.Request.Header.SetMethod(fasthttp.MethodPost)
		ctx.Request.Header.Set(FromHeader, "a")
		ctx.Request.Header.SetBytesV(AuthHeader, sig.appendAuth(nil, "POST", "/", "a", now.UnixMilli(), &nonce, body))
		if r.deadline != "" {
			ctx.Request.Header.Set(DeadlineHeader, r.deadline)
		}
		if r.auth != nil {
			ctx.Request.Header.Set(DeadlineAuthHeader, r.auth(&nonce, r.deadline))
		}
		ctx.Request.SetRequestURI("/")
		ctx.Request.SetBody(body)
		h(&ctx)
		return ctx.Response.StatusCode(), string(ctx.Response.Body())
	}
	dl := func(sent time.Time) string { return string(appendDeadline(nil, sent, 50*time.Millisecond)) }
	for i, tc := range []struct {
		name   string
		r      req
		status int
		msg    string
	}{
		{"signed, the reference", req{dl(now), signed}, 200, ""},
		{"signed, queued 100ms", req{dl(now.Add(-100 * time.Millisecond)), signed}, 503, "late"},
		{"unsigned deadline (an older sender): ignored", req{dl(now.Add(-100 * time.Millisecond)), nil}, 200, ""},
		{"no deadline", req{"", nil}, 200, ""},
		{"another request's deadline signature", req{dl(now), otherNonce}, 401, "wrong " + DeadlineAuthHeader},
		{"malformed", req{dl(now), func(*[NonceLen]byte, string) string { return "zz" }}, 401, "wrong " + DeadlineAuthHeader},
		{"signature of a removed deadline", req{"", func(n *[NonceLen]byte, _ string) string { return signed(n, dl(now)) }}, 401, "wrong"},
		{"signed, in time", req{dl(now.Add(-10 * time.Millisecond)), signed}, 200, ""},
	} {
		status, msg := send(tc.r)
		if status != tc.status || !strings.Contains(msg, tc.msg) {
			t.Errorf("%d %s: %d %q, want %d naming %q", i, tc.name, status, msg, tc.status, tc.msg)
		}
	}
	if n := len(d.sizes()); n != 4 {
		t.Errorf("decided %d batches, want 4", n)
	}
}
