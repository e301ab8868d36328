package rls_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/node/rls"
)

// certAuthority is a throwaway CA that issues certificates for 127.0.0.1
// (servers) and for clients (mTLS).
type certAuthority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	pem  []byte
}

func newCertAuthority(t testing.TB, name string) *certAuthority {
	t.Helper()
	ca := &certAuthority{pool: x509.NewCertPool()}
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	c, certPEM, _ := ca.sign(t, tmpl)
	ca.cert, ca.key, ca.pem = c.Leaf, c.PrivateKey.(*ecdsa.PrivateKey), certPEM
	ca.pool.AddCert(ca.cert)
	return ca
}

// sign makes a certificate of tmpl with a new key, signed by ca (by
// itself while ca has no certificate yet), and returns it and its key in
// PEM.
func (ca *certAuthority) sign(t testing.TB, tmpl *x509.Certificate) (c tls.Certificate, certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = serial, time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	parent, parentKey := ca.cert, ca.key
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	c, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c, certPEM, keyPEM
}

// server is a certificate for 127.0.0.1.
func (ca *certAuthority) server(t testing.TB) (c tls.Certificate, certPEM, keyPEM []byte) {
	return ca.sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: "rls"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
}

// client is a client certificate (mTLS).
func (ca *certAuthority) client(t testing.TB, name string) (c tls.Certificate, certPEM, keyPEM []byte) {
	return ca.sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: name},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

// withTLS is a newRig option that serves TLS with cfg.
func withTLS(cfg *tls.Config) func(*rls.ServerConfig) {
	return func(c *rls.ServerConfig) { c.TLS = cfg }
}

// dialH2TLS is dialH2 over TLS with cfg (ALPN h2 unless cfg says
// otherwise).
func dialH2TLS(t testing.TB, addr string, cfg *tls.Config) *h2client {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q, want h2", p)
	}
	c := newH2Client(t, conn)
	if _, err := io.WriteString(c.conn, http2.ClientPreface); err != nil {
		t.Fatalf("preface: %v", err)
	}
	c.check(c.fr.WriteSettings())
	c.readUntil("the server's SETTINGS", func() bool { return c.serverSettings })
	return c
}

// refusedTLS connects with cfg and checks that the server ends the
// connection without a frame: at the handshake (a TLS alert the client
// reads), or right after it (a client that negotiated no ALPN h2).
func refusedTLS(t *testing.T, addr string, cfg *tls.Config, what string) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Logf("%s: refused at the handshake: %v", what, err)
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(hangGuard)) // a hang guard only
	// With TLS 1.3 the client's handshake ends before the server has
	// checked its certificate: the server's verdict is the next read.
	io.WriteString(conn, http2.ClientPreface)
	fr := http2.NewFramer(conn, conn)
	fr.WriteSettings()
	f, err := fr.ReadFrame()
	if err == nil {
		t.Fatalf("%s: the server sent %v: served", what, f.Header())
	}
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the server neither served nor closed the connection", what)
	}
	t.Logf("%s: refused: %v", what, err)
}

// TestTransportTLS: with ServerConfig.TLS both transports serve gRPC over
// TLS with ALPN h2 (grpc-go's client, and the raw client); a client that
// negotiates no ALPN h2 is refused. With a client CA (mTLS), a client with
// a certificate it signed is served; one without a certificate, or with
// one from another CA, is refused at the handshake: no HTTP/2 frame from
// the server.
func TestTransportTLS(t *testing.T) {
	ca, other := newCertAuthority(t, "rls test CA"), newCertAuthority(t, "another CA")
	serverCert, _, _ := ca.server(t)
	clientCert, _, _ := ca.client(t, "envoy")
	strangerCert, _, _ := other.client(t, "stranger")
	client := func(certs ...tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: ca.pool, NextProtos: []string{"h2"}, Certificates: certs}
	}
	grpcCall := func(t *testing.T, r *rig, cfg *tls.Config) {
		t.Helper()
		conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, rlsReq("grpc-go", 2)); err != nil {
			t.Fatalf("grpc-go over TLS: %v", err)
		}
	}
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		t.Run("TLS", func(t *testing.T) {
			r := newRig(t, transportYAML, withTransport(tr), withTLS(&tls.Config{Certificates: []tls.Certificate{serverCert}}))
			grpcCall(t, r, client())
			dialH2TLS(t, r.addr, client()).call(1, "raw", 3)
			noALPN := client()
			noALPN.NextProtos = nil
			refusedTLS(t, r.addr, noALPN, "a client without ALPN")
			// The cleartext preface on a TLS port is no handshake.
			c := dialRaw(t, r.addr)
			io.WriteString(c.conn, http2.ClientPreface)
			c.readToEnd()
		})
		t.Run("mTLS", func(t *testing.T) {
			r := newRig(t, transportYAML, withTransport(tr), withTLS(&tls.Config{Certificates: []tls.Certificate{serverCert},
				ClientCAs: ca.pool, ClientAuth: tls.RequireAndVerifyClientCert}))
			grpcCall(t, r, client(clientCert))
			dialH2TLS(t, r.addr, client(clientCert)).call(1, "raw", 3)
			refusedTLS(t, r.addr, client(), "a client without a certificate")
			// Sent whatever CAs the server names (Go's client would send
			// none of another CA's).
			stranger := client()
			stranger.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &strangerCert, nil }
			refusedTLS(t, r.addr, stranger, "a client with another CA's certificate")
			// The server serves on: a client with a good certificate after
			// the refused ones.
			dialH2TLS(t, r.addr, client(clientCert)).call(1, "after", 1)
		})
	})
}
