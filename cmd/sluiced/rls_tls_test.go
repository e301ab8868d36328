package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// issueClient is a client certificate (mTLS) signed by ca.
func (ca *testCA) issueClient(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "envoy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestRLSTLS: with -tls-cert the rate limit service serves TLS with the
// node's certificate, on each -rls-transport; with -rls-client-ca it
// serves a client whose certificate that CA signed, and refuses one
// without a certificate or with another CA's.
func TestRLSTLS(t *testing.T) {
	ca := newTestCA(t, "sluice test CA")
	cert, key, caPath := ca.issue(t, t.TempDir())
	good := ca.issueClient(t)
	stranger := newTestCA(t, "another CA").issueClient(t)
	call := func(t *testing.T, d *daemon, certs ...tls.Certificate) error {
		t.Helper()
		cfg := &tls.Config{RootCAs: ca.pool}
		if len(certs) > 0 {
			// Sent whatever CAs the server names.
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
		}
		conn, err := grpc.NewClient(d.rls.ln.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "apis",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}})
		return err
	}
	for _, tr := range []string{"lean", "grpc"} {
		t.Run(tr, func(t *testing.T) {
			base := []string{"-listen", "127.0.0.1:0", "-rls-listen", "127.0.0.1:0", "-rls-transport", tr,
				"-rls-config", filepath.Join("..", "..", "deploy", "gateways", "ratelimit-config.yaml"), "-tls-cert", cert, "-tls-key", key}
			d := startRLSDaemon(t, base...)
			if err := call(t, d); err != nil {
				t.Errorf("TLS: %v", err)
			}
			d = startRLSDaemon(t, append(base, "-rls-client-ca", caPath)...)
			if err := call(t, d, good); err != nil {
				t.Errorf("mTLS with a certificate of -rls-client-ca: %v", err)
			}
			if err := call(t, d); err == nil {
				t.Errorf("mTLS without a client certificate: served")
			}
			if err := call(t, d, stranger); err == nil {
				t.Errorf("mTLS with another CA's certificate: served")
			}
		})
	}
}

func startRLSDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	o, err := parseOptions(args, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	d, err := start(o, slog.New(slog.NewTextHandler(io.Discard, nil)), hooks{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.stop(true); err != nil {
			t.Error(err)
		}
	})
	return d
}

// TestRLSClientCAOptions: -rls-client-ca needs -rls-listen and -tls-cert;
// a CA file that cannot be read or holds no certificate stops the start.
func TestRLSClientCAOptions(t *testing.T) {
	ca := newTestCA(t, "sluice test CA")
	dir := t.TempDir()
	cert, key, caPath := ca.issue(t, dir)
	for _, args := range [][]string{
		{"-rls-client-ca", caPath},
		{"-rls-client-ca", caPath, "-rls-listen", "127.0.0.1:0"},
		{"-rls-client-ca", caPath, "-tls-cert", cert, "-tls-key", key},
	} {
		if _, err := parseOptions(args, env(nil), nil); err == nil || !strings.Contains(err.Error(), "-rls-client-ca") {
			t.Errorf("%v: %v, want an error naming -rls-client-ca", args, err)
		}
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{filepath.Join(dir, "missing.pem"), notPEM} {
		o, err := parseOptions([]string{"-listen", "127.0.0.1:0", "-rls-listen", "127.0.0.1:0", "-tls-cert", cert, "-tls-key", key,
			"-rls-client-ca", bad}, env(nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := start(o, slog.New(slog.NewTextHandler(io.Discard, nil)), hooks{}); err == nil || !strings.Contains(err.Error(), "-rls-client-ca") {
			if err == nil {
				d.stop(true)
			}
			t.Errorf("-rls-client-ca %s: %v, want an error naming it", bad, err)
		}
	}
}
