package main

import (
	"bytes"
	"context"
	"io"
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
	d := startRLSDaemon(t, "-listen", "127.0.0.1:0", "-rls-listen", "127.0.0.1:0", "-rls-transport", transport,
		"-rls-config", filepath.Join("..", "..", "deploy", "gateways", "ratelimit-config.yaml"), "-rls-headers")
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

// TestRLSConnOptions: -rls-max-conns and -rls-idle-timeout (and their
// variables) default to 10000 and 5m, take 0 for none (no limit, never:
// -1 in rls.ServerConfig, whose 0 is the default), and refuse a bad value
// naming the flag or the variable.
func TestRLSConnOptions(t *testing.T) {
	o, err := parseOptions(nil, env(nil), io.Discard)
	if err != nil || o.rlsMaxConns != 10000 || o.rlsIdleTimeout != 5*time.Minute {
		t.Errorf("defaults: %d %v %v", o.rlsMaxConns, o.rlsIdleTimeout, err)
	}
	o, err = parseOptions([]string{"-rls-max-conns", "2", "-rls-idle-timeout", "200ms"}, env(map[string]string{"SLUICE_RLS_MAX_CONNS": "7", "SLUICE_RLS_IDLE_TIMEOUT": "1h"}), io.Discard)
	if err != nil || o.rlsMaxConns != 2 || o.rlsIdleTimeout != 200*time.Millisecond {
		t.Errorf("flags over the environment: %d %v %v", o.rlsMaxConns, o.rlsIdleTimeout, err)
	}
	o, err = parseOptions(nil, env(map[string]string{"SLUICE_RLS_MAX_CONNS": "0", "SLUICE_RLS_IDLE_TIMEOUT": "0"}), io.Discard)
	if err != nil || o.rlsMaxConns != 0 || o.rlsIdleTimeout != 0 {
		t.Errorf("0 from the environment: %d %v %v", o.rlsMaxConns, o.rlsIdleTimeout, err)
	}
	if noneIfZero(o.rlsMaxConns) != -1 || noneIfZero(o.rlsIdleTimeout) != -1 || noneIfZero(2) != 2 {
		t.Error("0 is not passed to rls.ServerConfig as none")
	}
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-rls-max-conns", "-1"}, nil, "-rls-max-conns"},
		{[]string{"-rls-max-conns", "1000001"}, nil, "-rls-max-conns"},
		{[]string{"-rls-max-conns", "many"}, nil, "-rls-max-conns"},
		{nil, map[string]string{"SLUICE_RLS_MAX_CONNS": "1e3"}, "SLUICE_RLS_MAX_CONNS"},
		{[]string{"-rls-idle-timeout", "-1s"}, nil, "-rls-idle-timeout"},
		{[]string{"-rls-idle-timeout", "5"}, nil, "-rls-idle-timeout"},
		{[]string{"-rls-idle-timeout", "25h"}, nil, "-rls-idle-timeout"},
		{nil, map[string]string{"SLUICE_RLS_IDLE_TIMEOUT": "soon"}, "SLUICE_RLS_IDLE_TIMEOUT"},
	} {
		if _, err := parseOptions(c.args, env(c.env), io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: %v; want an error naming %s", c.args, c.env, err, c.want)
		}
	}
}
