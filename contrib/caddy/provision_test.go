package sluicecaddy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rules"
)

const testToken = "caddy-test-client-token"

// tlsNode serves a real node over TLS with a certificate for 127.0.0.1
// of a CA made for the test, and returns its https:// URL and the CA's
// PEM file.
func tlsNode(t *testing.T) (url, caPath string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "sluice node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caPath = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}

	store := lease.NewMemoryStore(lease.MemoryStoreConfig{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	mcfg := lease.DefaultConfig()
	mcfg.StoreTimeout = time.Minute // a loaded machine must not make the Store look failed
	mgr := lease.NewManager(store, mcfg)
	cfg := node.DefaultConfig()
	cfg.ClientToken = testToken
	n := node.New(cfg, mgr)
	set, err := rules.Parse([]byte("rules:\n  - {name: per-key, algorithm: token_bucket, limit: 10, period: 1h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	n.SetRules(set)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln := tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	served := make(chan error, 1)
	go func() { served <- n.Serve(tln) }()
	t.Cleanup(func() { _ = n.Shutdown(context.Background()); <-served; mgr.Close() })
	return "https://" + ln.Addr().String(), caPath
}

// tls_ca makes the handler trust the nodes' private CA: it provisions
// against an https:// node whose certificate chains to it and decides
// through it; without tls_ca the node's certificate cannot be verified
// and provisioning fails.
func TestProvisionTLSCA(t *testing.T) {
	url, caPath := tlsNode(t)
	provision := func(ca string) (*Handler, error) {
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		t.Cleanup(cancel)
		h := &Handler{Nodes: []string{url}, Token: testToken, Rule: "per-key", Key: "{http.request.header.X-API-Key}", TLSCA: ca}
		if err := h.Provision(ctx); err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = h.Cleanup() })
		return h, nil
	}
	if _, err := provision(""); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without tls_ca: %v, want a certificate error", err)
	}
	h, err := provision(caPath)
	if err != nil {
		t.Fatalf("with tls_ca %s: %v", caPath, err)
	}
	d, err := h.limiter.Allow(t.Context(), "per-key", "k", 1)
	if err != nil || !d.Allowed || d.Degraded {
		t.Fatalf("a check over TLS: %+v, %v", d, err)
	}
	if _, err := provision(filepath.Join(t.TempDir(), "missing.pem")); err == nil || !strings.Contains(err.Error(), "tls_ca") {
		t.Fatalf("a missing tls_ca file: %v, want an error naming tls_ca", err)
	}
}
