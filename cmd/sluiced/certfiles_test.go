package main

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCertFilesFollowRotation: a rotated -tls-cert/-tls-key pair is served
// from the first handshake a second after the last look; a pair that
// does not load is logged and the last good one kept; nothing is read
// again before a second has passed (a fake clock).
func TestCertFilesFollowRotation(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "rotation CA")
	certPath, keyPath, _ := ca.issue(t, dir)
	var logs bytes.Buffer
	c, err := newCertFiles(certPath, keyPath, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	c.now = func() time.Time { return now }
	c.checked = now
	serial := func() string {
		t.Helper()
		got, err := c.get(&tls.ClientHelloInfo{})
		if err != nil || got == nil {
			t.Fatalf("get: %v, %v", got, err)
		}
		return got.Leaf.SerialNumber.String()
	}
	first := serial()

	// A new pair, as cert-manager writes it: new files renamed into place.
	next := t.TempDir()
	newCert, newKey, _ := ca.issue(t, next)
	rename := func(from, to string) {
		t.Helper()
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	rename(newCert, certPath)
	rename(newKey, keyPath)
	now = now.Add(certCheckEvery - time.Nanosecond)
	if got := serial(); got != first {
		t.Fatalf("read again %v after the last look: serial %s, want the first %s", certCheckEvery-time.Nanosecond, got, first)
	}
	now = now.Add(time.Nanosecond)
	second := serial()
	if second == first {
		t.Fatalf("a rotated pair is not served %v after the last look", certCheckEvery)
	}
	if !strings.Contains(logs.String(), "TLS certificate reloaded") {
		t.Errorf("no log line for the reload: %q", logs.String())
	}

	// Half a rotation: a certificate whose key is not there yet.
	other := t.TempDir()
	thirdCert, _, _ := ca.issue(t, other)
	rename(thirdCert, certPath)
	now = now.Add(certCheckEvery)
	if got := serial(); got != second {
		t.Fatalf("a pair that does not load replaced the good one: serial %s, want %s", got, second)
	}
	if !strings.Contains(logs.String(), "cannot load the new -tls-cert/-tls-key") {
		t.Errorf("no warning for the pair that does not load: %q", logs.String())
	}
	warnings := strings.Count(logs.String(), "cannot load")
	now = now.Add(certCheckEvery)
	serial()
	if n := strings.Count(logs.String(), "cannot load"); n != warnings {
		t.Errorf("the same bad pair warned about %d times, want once", n)
	}
	// The key arrives: the pair loads.
	rename(filepath.Join(other, "node-key.pem"), keyPath)
	now = now.Add(certCheckEvery)
	if got := serial(); got == second || got == first {
		t.Fatalf("the completed pair is not served: serial %s", got)
	}
}

// TestTLSCertRotationServed: a node started with -tls-cert serves a
// rotated pair without a restart, on its HTTP API and its rate limit
// service, and no longer the old one (what envoyproxy/ratelimit's
// TestReloadGRPCServerCerts asks of its gRPC server, and what a mesh's
// certificate rotation needs).
func TestTLSCertRotationServed(t *testing.T) {
	// Every handshake looks at the files (certCheckEvery 0), so the first
	// dial after the rotation is served the new pair: no waiting on the
	// clock. Restored after the daemon stops (cleanups run last first).
	every := certCheckEvery
	t.Cleanup(func() { certCheckEvery = every })
	certCheckEvery = 0
	dir := t.TempDir()
	ca := newTestCA(t, "rotation CA")
	certPath, keyPath, _ := ca.issue(t, dir)
	d := startRLSDaemon(t, "-listen", "127.0.0.1:0", "-rls-listen", "127.0.0.1:0",
		"-rls-config", filepath.Join("..", "..", "deploy", "gateways", "ratelimit-config.yaml"),
		"-tls-cert", certPath, "-tls-key", keyPath)
	next := newTestCA(t, "the next CA")
	dial := func(addr string, ca *testCA) error {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool})
		if err == nil {
			c.Close()
		}
		return err
	}
	addrs := map[string]string{"HTTP API": d.ln.Addr().String(), "rate limit service": d.rls.ln.Addr().String()}
	for what, addr := range addrs {
		if err := dial(addr, ca); err != nil {
			t.Fatalf("%s before the rotation: %v", what, err)
		}
	}
	newCert, newKey, _ := next.issue(t, t.TempDir())
	for from, to := range map[string]string{newCert: certPath, newKey: keyPath} {
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	for what, addr := range addrs {
		if err := dial(addr, next); err != nil {
			t.Fatalf("%s: the rotated pair is not served: %v", what, err)
		}
		if dial(addr, ca) == nil {
			t.Errorf("%s still serves the old certificate after the new one", what)
		}
	}
}
