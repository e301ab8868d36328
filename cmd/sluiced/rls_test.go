package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/node/rls"
)

// TestRLSDaemon starts a node with -rls-listen and the shipped
// deploy/gateways/ratelimit-config.yaml and calls it with go-control-plane's
// client over TCP, on each -rls-transport.
func TestRLSDaemon(t *testing.T) {
	for _, tr := range []string{"lean", "grpc"} {
		t.Run(tr, func(t *testing.T) { testRLSDaemon(t, tr) })
	}
}

func testRLSDaemon(t *testing.T, transport string) {
	o, err := parseOptions([]string{"-listen", "127.0.0.1:0", "-rls-listen", "127.0.0.1:0", "-rls-transport", transport,
		"-rls-config", filepath.Join("..", "..", "deploy", "gateways", "ratelimit-config.yaml"), "-rls-headers"}, env(nil), io.Discard)
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
	conn, err := grpc.NewClient(d.rls.ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &rlsv3.RateLimitRequest{Domain: "apis", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}},
	}, HitsAddend: 60}
	res, err := c.ShouldRateLimit(ctx, req)
	if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK || len(res.ResponseHeadersToAdd) == 0 {
		t.Fatalf("first call: %v %v", res, err)
	}
	// 61 hits at once are over 60 per minute in any window (another
	// address: counted apart).
	req.HitsAddend = 61
	req.Descriptors[0].Entries[0].Value = "10.0.0.2"
	if res, err = c.ShouldRateLimit(ctx, req); err != nil || res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("61 hits: %v %v", res, err)
	}
}

// TestRLSStartFailures: a bad configuration stops the start, naming the
// file and the field.
func TestRLSStartFailures(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-listen", "127.0.0.1:0", "-rls-listen", "127.0.0.1:0", "-rls-config", bad}, "bad.yaml:4"},
		{[]string{"-listen", "127.0.0.1:0", "-rls-config", bad}, "needs -rls-listen"},
		{[]string{"-listen", "127.0.0.1:0", "-rls-listen", "nope", "-rls-config", filepath.Join("..", "..", "deploy", "gateways", "ratelimit-config.yaml")}, "-rls-listen"},
	} {
		var out bytes.Buffer
		if code := run(c.args, env(nil), &out); code != 1 || !strings.Contains(out.String(), c.want) {
			t.Errorf("%v: exit %d, output %q; want 1 mentioning %q", c.args, code, out.String(), c.want)
		}
	}
}

// TestRLSTransportOption: -rls-transport and SLUICE_RLS_TRANSPORT take lean
// or grpc; another value is an error naming the flag or the variable.
func TestRLSTransportOption(t *testing.T) {
	o, err := parseOptions([]string{"-rls-transport", "lean"}, env(map[string]string{"SLUICE_RLS_TRANSPORT": "grpc"}), io.Discard)
	if err != nil || o.rlsTransport != rls.TransportLean {
		t.Errorf("-rls-transport lean over SLUICE_RLS_TRANSPORT=grpc: %q %v", o.rlsTransport, err)
	}
	if _, err := parseOptions([]string{"-rls-transport", "h3"}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "-rls-transport: want lean or grpc") {
		t.Errorf("-rls-transport h3: %v", err)
	}
	if _, err := parseOptions(nil, env(map[string]string{"SLUICE_RLS_TRANSPORT": "h3"}), io.Discard); err == nil || !strings.Contains(err.Error(), "SLUICE_RLS_TRANSPORT: want lean or grpc") {
		t.Errorf("SLUICE_RLS_TRANSPORT=h3: %v", err)
	}
}
