package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/node/client"
)

// testCA is a throw-away certificate authority for TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	return ca
}

// issue writes a certificate for 127.0.0.1 signed by ca, its key and the
// CA into dir and returns the three paths.
func (ca *testCA) issue(t *testing.T, dir string) (certPath, keyPath, caPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "sluice node"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath, caPath = filepath.Join(dir, "node.pem"), filepath.Join(dir, "node-key.pem"), filepath.Join(dir, "ca.pem")
	for p, b := range map[string][]byte{
		certPath: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPath:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		caPath:   ca.pem,
	} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certPath, keyPath, caPath
}

// TestClusterTLS runs a keyed cluster over TLS (-tls-cert, -tls-key,
// -tls-ca): the public API answers HTTPS only, checks are forwarded to
// their owner over verified TLS, and a node that does not trust the
// owner's CA cannot forward (it decides locally).
func TestClusterTLS(t *testing.T) {
	tc := newTestCluster(t, clusterRules)
	ca := newTestCA(t, "sluice test CA")
	cert, key, caPath := ca.issue(t, t.TempDir())
	tc.useTLS(ca.pool)
	tc.args = []string{"-tls-cert", cert, "-tls-key", key, "-tls-ca", caPath}
	a := tc.start("node-a")
	b := tc.start("node-b", a)
	tc.converge("node-a,node-b", a, b)
	if !strings.HasPrefix(a.base, "https://") {
		t.Fatalf("base %s", a.base)
	}

	// Keys node-a owns, checked through node-b: forwarded over TLS.
	sent := 0
	for i := 0; sent < 20; i++ {
		k := "tls-" + strconv.Itoa(i)
		if a.d.node.Owner("per-key:"+k) != "node-a" {
			continue
		}
		if code := tc.check(b, k); code != 200 {
			t.Fatalf("check via node-b: %d", code)
		}
		sent++
	}
	// (On a loaded machine a forward may time out and be decided by
	// node-b: at least some must have been answered over TLS.)
	if st := b.d.node.ForwardStats(); st.Items == 0 {
		t.Errorf("node-b forward stats %+v, want items answered by node-a over TLS", st)
	}

	// The Go client over TLS: it learns the members (with the admin
	// token's loopback exemption) and sends each check to its owner.
	cl, err := client.New(client.Config{Seeds: []string{b.d.ln.Addr().String()}, Timeout: 5 * time.Second,
		TLS: &tls.Config{RootCAs: ca.pool}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r, err := cl.Check(context.Background(), "per-key", "tls-client", 1); err != nil || !r.Allowed {
		t.Errorf("client check over TLS: %+v, %v", r, err)
	}

	// Plain HTTP to a TLS node gets no answer.
	plain := &http.Client{Timeout: 5 * time.Second}
	if res, err := plain.Get("http://" + a.d.ln.Addr().String() + "/healthz"); err == nil {
		res.Body.Close()
		if res.StatusCode == 200 {
			t.Error("plain HTTP answered 200 by a TLS node")
		}
	}

	// A node that trusts another CA cannot verify node-a: its forwards
	// fail, and it decides those checks itself.
	other := newTestCA(t, "another CA")
	_, _, otherCA := other.issue(t, t.TempDir())
	tc.args = []string{"-tls-cert", cert, "-tls-key", key, "-tls-ca", otherCA}
	c := tc.start("node-c", a)
	tc.args = nil
	tc.converge("node-a,node-b,node-c", a, b, c)
	for i := 0; ; i++ {
		k := "tls-c-" + strconv.Itoa(i)
		if a.d.node.Owner("per-key:"+k) != "node-a" {
			continue
		}
		if code := tc.check(c, k); code != 200 {
			t.Fatalf("check via node-c: %d", code)
		}
		break
	}
	if st := c.d.node.ForwardStats(); st.Failed == 0 || st.Items != 0 {
		t.Errorf("node-c forward stats %+v, want its forward to node-a failed (unknown CA)", st)
	}
}

// TestTLSOptions: -tls-cert and -tls-key go together; -tls-ca needs them;
// unreadable files stop the start.
func TestTLSOptions(t *testing.T) {
	for _, args := range [][]string{{"-tls-cert", "c.pem"}, {"-tls-key", "k.pem"}, {"-tls-ca", "ca.pem"}} {
		if _, err := parseOptions(args, env(nil), nil); err == nil || !strings.Contains(err.Error(), "-tls-") {
			t.Errorf("%v: %v, want an error naming the TLS flags", args, err)
		}
	}
	dir := t.TempDir()
	o, err := parseOptions([]string{"-listen", "127.0.0.1:0", "-tls-cert", filepath.Join(dir, "missing.pem"), "-tls-key", filepath.Join(dir, "k.pem")}, env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadTLS(o, slog.Default()); err == nil || !strings.Contains(err.Error(), "-tls-cert") {
		t.Errorf("missing files: %v", err)
	}
}
