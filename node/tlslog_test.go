package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
)

// selfSigned is a certificate for 127.0.0.1.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTLSHandshakeFailuresLogOnce: 40 connections that speak plain HTTP
// to the TLS port are counted in sluice_http_tls_handshake_errors_total
// and logged in one warning line with their count, not one ERROR line
// each (issue 35: 80 bad connections logged 30 "internal error" lines).
func TestTLSHandshakeFailuresLogOnce(t *testing.T) {
	var logs syncBuf
	cfg := DefaultConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	t.Cleanup(func() { store.Close() })
	mgr := lease.NewManager(store, lease.DefaultConfig())
	t.Cleanup(func() { mgr.Close() })
	n := New(cfg, mgr)
	clk := clocktest.New()
	n.tlsFail.now = clk.Now
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}})
	go func() { _ = n.Serve(ln) }()
	t.Cleanup(func() { _ = n.Shutdown(t.Context()) })
	bad := func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
		_, _ = io.Copy(io.Discard, c)
	}
	const bads = 40
	for range bads {
		bad()
	}
	clocktest.Eventually(t, 10*time.Second, "every failed handshake counted", func() bool { return n.tlsFail.met.Get() == bads })
	out := logs.String()
	if strings.Contains(out, "level=ERROR") {
		t.Errorf("failed handshakes logged at ERROR:\n%s", out)
	}
	if got := strings.Count(out, "TLS handshakes failed"); got != 1 {
		t.Errorf("%d lines about failed handshakes within one interval, want 1:\n%s", got, out)
	}
	clk.Advance(tlsFailEvery)
	bad()
	clocktest.Eventually(t, 10*time.Second, "the next failure counted", func() bool { return n.tlsFail.met.Get() == bads+1 })
	if out := logs.String(); strings.Count(out, "TLS handshakes failed") != 2 || !strings.Contains(out, "count="+itoa(bads)) {
		t.Errorf("after the interval, want a second line counting the %d failures since the first:\n%s", bads, out)
	}
}

func itoa(n int) string { return big.NewInt(int64(n)).String() }
