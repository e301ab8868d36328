//go:build e2e

package rls_test

import (
	"os"
	"path/filepath"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestE2ETLS calls a sluiced's rate limit service over TLS and mTLS with
// gRPC's C core (Python's grpcio), on each transport, with a throwaway CA
// and certificates made here: -tls-cert serves TLS (a client that trusts
// the CA is served); with -rls-client-ca, a client with a certificate that
// CA signed is served, one without a certificate or with another CA's is
// refused (its calls fail UNAVAILABLE: the handshake never completes).
func TestE2ETLS(t *testing.T) {
	python := interopPython(t)
	bin := interopSluiced(t)
	ca, other := newCertAuthority(t, "e2e CA"), newCertAuthority(t, "another CA")
	_, serverCert, serverKey := ca.server(t)
	_, clientCert, clientKey := ca.client(t, "envoy")
	_, strangerCert, strangerKey := other.client(t, "stranger")
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	certPath, keyPath, caPath := write("node.pem", serverCert), write("node-key.pem", serverKey), write("ca.pem", ca.pem)
	calls := func(key string) []interopCall {
		return []interopCall{
			{Name: "rls", Method: interopRLSPath, Requests: []string{
				interopRequest(t, &rlsv3.RateLimitRequest{Domain: "interop", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=" + key)}, HitsAddend: 3}),
			}},
			{Name: "health", Method: interopHealthPath, Requests: []string{interopRequest(t, &healthpb.HealthCheckRequest{})}},
		}
	}
	served := func(t *testing.T, n *interopNode, tls *interopTLS, key string) {
		t.Helper()
		got := runInteropPython(t, python, interopPlan{Target: n.rls, TLS: tls, Calls: calls(key)})
		interopWant(t, key, got.ok(t, "rls")[0], "OK: OK", 7)
		if r := got.results(t, "health", 1)[0]; r.Code != "OK" {
			t.Errorf("health over TLS: %s %q", r.Code, r.Details)
		}
	}
	refused := func(t *testing.T, n *interopNode, tls *interopTLS, what string) {
		t.Helper()
		got := runInteropPython(t, python, interopPlan{Target: n.rls, TLS: tls, NoWait: true, Calls: calls("refused")})
		for _, name := range []string{"rls", "health"} {
			if r := got.results(t, name, 1)[0]; r.Code != "UNAVAILABLE" {
				t.Errorf("%s, %s: %s %q, want UNAVAILABLE", what, name, r.Code, r.Details)
			} else {
				t.Logf("%s, %s: %s %q", what, name, r.Code, r.Details)
			}
		}
	}
	for _, tr := range interopTransports {
		t.Run(tr, func(t *testing.T) {
			t.Run("TLS", func(t *testing.T) {
				n := startInteropNode(t, bin, tr, "-tls-cert", certPath, "-tls-key", keyPath)
				served(t, n, &interopTLS{CA: string(ca.pem)}, "tls-"+tr)
			})
			t.Run("mTLS", func(t *testing.T) {
				n := startInteropNode(t, bin, tr, "-tls-cert", certPath, "-tls-key", keyPath, "-rls-client-ca", caPath)
				served(t, n, &interopTLS{CA: string(ca.pem), Cert: string(clientCert), Key: string(clientKey)}, "mtls-"+tr)
				refused(t, n, &interopTLS{CA: string(ca.pem)}, "no client certificate")
				refused(t, n, &interopTLS{CA: string(ca.pem), Cert: string(strangerCert), Key: string(strangerKey)}, "another CA's certificate")
			})
		})
	}
}
