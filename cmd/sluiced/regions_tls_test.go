package main

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/node/upstream"
)

// TestUpstreamTLSCA: a global tier served over TLS by a certificate of a
// private CA is reached over https:// with -tls-ca, which verifies an
// https:// -upstream as it verifies peers (with no -tls-cert of its own:
// the region serves plain HTTP); without it the upstream cannot be
// verified and the region refuses to start.
func TestUpstreamTLSCA(t *testing.T) {
	ca := newTestCA(t, "global tier CA")
	cert, key, caPath := ca.issue(t, t.TempDir())
	global, err := startRegionNode(t, globalRules, "-client-token", upstreamToken, "-tls-cert", cert, "-tls-key", key)
	if err != nil {
		t.Fatal(err)
	}
	up := "https://" + global.d.ln.Addr().String()

	_, err = startRegionNode(t, regionRules, "-upstream", up, "-upstream-token", upstreamToken, "-region", "eu")
	if !errors.Is(err, upstream.ErrUnreachable) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("region without -tls-ca: %v, want the upstream refused as unverified (a certificate error)", err)
	}

	region, err := startRegionNode(t, regionRules, "-upstream", up, "-upstream-token", upstreamToken, "-region", "eu", "-tls-ca", caPath)
	if err != nil {
		t.Fatalf("region with -tls-ca %s: %v", caPath, err)
	}
	if st, m := region.check(t, "g", "tls-key", 1); st != http.StatusOK || m["degraded"] == true {
		t.Fatalf("a global rule's check in the region: %d %v, want allowed by a lease of the global tier over TLS", st, m)
	}
	if got := region.d.upstream.Manager().Stats().TokensLeased; got == 0 {
		t.Fatal("the region leased nothing from the global tier")
	}
}
