package node

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/sluicehq/sluice/lease"
)

// syncBuffer is a log destination safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMalformedRequestHeadersNotLogged: at debug level, a request that
// fasthttp cannot parse is logged without its headers' values.
func TestMalformedRequestHeadersNotLogged(t *testing.T) {
	var logs syncBuffer
	cfg := DefaultConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	mgr := lease.NewManager(store, lease.DefaultConfig())
	n := New(cfg, mgr)
	ln := fasthttputil.NewInmemoryListener()
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
		<-served
		mgr.Close()
		store.Close()
	})
	for _, req := range []string{
		"GET /v1/auth HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer SECRET-BEARER\r\nX-Api-Key: SECRET-APIKEY\r\nno colon here\r\n\r\n",
		"GET /v1/auth HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer SECRET-BEARER\r\nX-Api-Key: SECRET-APIKEY\r\nContent-Length: -1\r\n\r\n",
		"GET /v1/auth HTTP/1.1\r\nHost: x\r\nAuthorization Bearer SECRET-BEARER\r\n\r\n",
		"GET /v1/auth?api_key=SECRET-QUERY HTTP/1.1\r\nHost: x\r\nX-Api-Key: SECRET-APIKEY\r\nTransfer-Encoding: bogus\r\n\r\n",
		"BAD\x00 /v1/auth HTTP/1.1\r\nAuthorization: Bearer SECRET-BEARER\r\nX-Api-Key: SECRET-APIKEY\r\n\r\n",
	} {
		c, err := ln.Dial()
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = c.Write([]byte(req)) }()
		var res fasthttp.Response
		err = res.Read(bufio.NewReader(c))
		c.Close()
		if err == nil && res.StatusCode() < 400 {
			t.Errorf("%q: answered %d", req, res.StatusCode())
		}
	}
	// The server logs a connection's error when the connection ends:
	// shutting down waits for every connection.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, "fasthttp") {
		t.Fatalf("no fasthttp line was logged (the test sends nothing malformed?):\n%s", out)
	}
	if strings.Contains(out, "SECRET") {
		t.Errorf("a header value is in the log:\n%s", out)
	}
}
