package forward

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease/clocktest"
)

var testKey = []byte("0123456789abcdef")

// signAt returns an AuthHeader value for a request signed with key at
// t, with a fresh nonce.
func signAt(key []byte, method, path string, t time.Time, body []byte) string {
	n := newNonce()
	return string(newSigner(key).appendAuth(nil, method, path, "", t.UnixMilli(), &n, body))
}

// flip changes the digit at i of s to another digit.
func flip(s string, i int) string {
	c := byte('1')
	if s[i] == '1' {
		c = '2'
	}
	return s[:i] + string(c) + s[i+1:]
}

// logBuf is a concurrency-safe log sink.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func TestHandlerAuth(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clock := clocktest.At(now)
	body, _ := AppendBatch(nil, []Item{{Op: OpCheck, Rule: "r", Key: "k1", Hits: 1}})
	other, _ := AppendBatch(nil, []Item{{Op: OpRefund, Rule: "r", Key: "k1", Hits: 1}})
	d := &echoDecider{}
	secured := startServer(t, NewHandler(HandlerConfig{ClusterKey: testKey, Now: clock.Now}, d))
	open := startServer(t, NewHandler(HandlerConfig{}, &echoDecider{}))
	good := signAt(testKey, "POST", Path, now, body)
	tests := []struct {
		name   string
		addr   string
		auth   string
		body   []byte
		status int
		msg    string
	}{
		{"signed", secured.addr, signAt(testKey, "POST", Path, now, body), body, 200, ""},
		{"missing", secured.addr, "", body, 401, "missing"},
		{"malformed", secured.addr, "hello", body, 401, "want <unix ms>"},
		{"old constant token", secured.addr, "008981f9124a7c4d0656763583bd7c123e4944f2588c7a68bd3b6ebce5b203f3", body, 401, "want <unix ms>"},
		{"wrong key", secured.addr, signAt([]byte("fedcba9876543210"), "POST", Path, now, body), body, 401, "wrong signature"},
		// The signature of one body does not carry over to another (a
		// check's signature on a refund).
		{"modified body", secured.addr, signAt(testKey, "POST", Path, now, body), other, 401, "wrong signature"},
		{"truncated body", secured.addr, signAt(testKey, "POST", Path, now, body), body[:len(body)-1], 401, "wrong signature"},
		{"other path", secured.addr, signAt(testKey, "POST", "/internal/v2/batch", now, body), body, 401, "wrong signature"},
		{"other method", secured.addr, signAt(testKey, "PUT", Path, now, body), body, 401, "wrong signature"},
		{"modified timestamp", secured.addr, flip(good, strings.IndexByte(good, '.')-1), body, 401, "wrong signature"},
		{"modified nonce", secured.addr, flip(good, len(good)-66), body, 401, "wrong signature"},
		{"modified MAC", secured.addr, flip(good, len(good)-1), body, 401, "wrong signature"},
		{"old", secured.addr, signAt(testKey, "POST", Path, now.Add(-31*time.Second), body), body, 401, "window"},
		{"future", secured.addr, signAt(testKey, "POST", Path, now.Add(31*time.Second), body), body, 401, "window"},
		{"old but within the window", secured.addr, signAt(testKey, "POST", Path, now.Add(-29*time.Second), body), body, 200, ""},
		{"open endpoint, unsigned", open.addr, "", body, 200, ""},
		{"open endpoint ignores a signature", open.addr, "anything", body, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, got := post(t, tt.addr, "POST", tt.auth, tt.body)
			if status != tt.status || !strings.Contains(string(got), tt.msg) {
				t.Fatalf("status %d (%s), want %d naming %q", status, got, tt.status, tt.msg)
			}
			if status != 200 {
				return
			}
			rs, _, err := DecodeReply(nil, nil, got)
			if err != nil || len(rs) != 1 || rs[0] != want(Item{Op: OpCheck, Rule: "r", Key: "k1", Hits: 1}) {
				t.Errorf("reply %+v, %v", rs, err)
			}
		})
	}
	if n := len(d.sizes()); n != 2 {
		t.Errorf("the secured decider saw %d batches, want 2 (the signed ones)", n)
	}
}

// TestHandlerReplay: a captured request sent again is refused, and its
// items are decided once.
func TestHandlerReplay(t *testing.T) {
	clock := clocktest.At(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	d := &echoDecider{}
	s := startServer(t, NewHandler(HandlerConfig{ClusterKey: testKey, Now: clock.Now}, d))
	body, _ := AppendBatch(nil, []Item{{Op: OpCheck, Rule: "day", Key: "victim", Hits: 1}})
	auth := signAt(testKey, "POST", Path, clock.Now(), body)
	if status, got := post(t, s.addr, "POST", auth, body); status != 200 {
		t.Fatalf("first: %d %s", status, got)
	}
	for i, dt := range []time.Duration{0, time.Second, 29 * time.Second} {
		clock.Set(clock.Now().Add(dt))
		if status, got := post(t, s.addr, "POST", auth, body); status != 401 || !strings.Contains(string(got), "replayed") {
			t.Errorf("replay %d: %d %s, want 401 replayed", i, status, got)
		}
	}
	// Past the window, the timestamp refuses it.
	clock.Set(clock.Now().Add(time.Hour))
	if status, got := post(t, s.addr, "POST", auth, body); status != 401 || !strings.Contains(string(got), "window") {
		t.Errorf("replay after an hour: %d %s, want 401 outside the window", status, got)
	}
	if n := len(d.sizes()); n != 1 {
		t.Errorf("decided %d times, want once", n)
	}
}

// TestHandlerSkewLog: a correctly signed request outside the window logs
// one warning naming the skew, however many follow within 10s.
func TestHandlerSkewLog(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clock := clocktest.At(now)
	var logs logBuf
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s := startServer(t, NewHandler(HandlerConfig{ClusterKey: testKey, Window: 5 * time.Second, Now: clock.Now, Logger: log}, &echoDecider{}))
	body, _ := AppendBatch(nil, []Item{{Op: OpCheck, Rule: "r", Key: "k1", Hits: 1}})
	for range 3 {
		if status, _ := post(t, s.addr, "POST", signAt(testKey, "POST", Path, now.Add(-time.Minute), body), body); status != 401 {
			t.Fatalf("status %d, want 401", status)
		}
	}
	// A forged request outside the window logs nothing (no log flooding
	// without the key).
	post(t, s.addr, "POST", signAt([]byte("fedcba9876543210"), "POST", Path, now.Add(-time.Minute), body), body)
	if got := strings.Count(logs.String(), "outside the acceptance window"); got != 1 || !strings.Contains(logs.String(), "skew=1m0s") ||
		!strings.Contains(logs.String(), "window=5s") {
		t.Errorf("%d warnings, want 1 naming skew and window:\n%s", got, logs.String())
	}
	clock.Set(now.Add(11 * time.Second))
	post(t, s.addr, "POST", signAt(testKey, "POST", Path, now.Add(-time.Minute), body), body)
	if got := strings.Count(logs.String(), "outside the acceptance window"); got != 2 {
		t.Errorf("%d warnings after 11s, want 2", got)
	}
}

func TestNonceCache(t *testing.T) {
	const w = 30 * time.Second
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	c := newNonceCache(w, 3)
	n := func(b byte) *[NonceLen]byte { return &[NonceLen]byte{b} }
	if err := c.add(n(1), t0); err != nil {
		t.Fatal(err)
	}
	// Kept for at least 2 × window (a request accepted window before its
	// timestamp is still acceptable window after it).
	for _, dt := range []time.Duration{0, w, 2*w - 1, 2 * w, 4*w - 1} {
		if err := c.add(n(1), t0.Add(dt)); !errors.Is(err, errReplay) {
			t.Errorf("at +%v: %v, want errReplay", dt, err)
		}
	}
	if err := c.add(n(1), t0.Add(8*w)); err != nil {
		t.Errorf("long after: %v, want it forgotten", err)
	}
	// Bounded: a full generation refuses new nonces, never forgets.
	c = newNonceCache(w, 2)
	c.add(n(1), t0)
	c.add(n(2), t0)
	if err := c.add(n(3), t0); !errors.Is(err, errNonceCacheFull) {
		t.Errorf("third nonce: %v, want errNonceCacheFull", err)
	}
	if err := c.add(n(1), t0); !errors.Is(err, errReplay) {
		t.Errorf("a full cache forgot nonce 1: %v", err)
	}
}

func TestParseAuth(t *testing.T) {
	key := []byte("k")
	good := signAt(key, "POST", Path, time.UnixMilli(1_700_000_000_000), []byte("b"))
	if a, err := parseAuth([]byte(good)); err != nil || a.ts != 1_700_000_000_000 {
		t.Errorf("%q: %+v %v", good, a, err)
	}
	tail := good[strings.IndexByte(good, '.'):]
	for _, bad := range []string{"", ".", good[:len(good)-1], good + "0", "x" + good, "-1" + tail, "99999999999999999999" + tail,
		strings.Replace(good, ".", ":", 1), good[:len(good)-1] + "g", strings.ToUpper(good)[:len(good)-64] + good[len(good)-64:] + "z"} {
		if _, err := parseAuth([]byte(bad)); !errors.Is(err, ErrAuth) {
			t.Errorf("%q: %v, want ErrAuth", bad, err)
		}
	}
}

// TestForwardReplyAuth: a sender with a key refuses a reply that is not
// signed by the owner, or whose body was changed on the way.
func TestForwardReplyAuth(t *testing.T) {
	it := Item{Op: OpCheck, Rule: "r", Key: "k5", Hits: 9} // echoDecider denies hits > 5
	h := NewHandler(HandlerConfig{ClusterKey: testKey}, &echoDecider{})
	tamper := startServer(t, func(ctx *fasthttp.RequestCtx) {
		h(ctx)
		rs, ps, err := DecodeReply(nil, nil, ctx.Response.Body())
		if err == nil && len(rs) == 1 {
			rs[0].Allowed = true // an on-path attacker flips the answer
			b, _ := AppendReply(nil, rs, ps)
			ctx.Response.SetBody(b)
		}
	})
	unsigned := startServer(t, NewHandler(HandlerConfig{}, &echoDecider{}))
	for name, addr := range map[string]string{"tampered": tamper.addr, "unsigned": unsigned.addr} {
		f := newForwarder(t, Config{ClusterKey: testKey})
		r, err := f.Forward(context.Background(), addr, it)
		if !isUnavailable(err) || !strings.Contains(err.Error(), "reply not authenticated") {
			t.Errorf("%s: %+v, %v; want ErrPeerUnavailable, reply not authenticated", name, r, err)
		}
	}
}
