//go:build e2e

package rls_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// The end-to-end tests of the rate limit service against HTTP/2 and gRPC
// implementations that are not grpc-go, from Debian's packages (make
// e2e-deps installs them): gRPC's C core (python3-grpcio), and nghttp2's
// nghttp and h2load (nghttp2-client; nghttp2 was Envoy's HTTP/2 codec for
// years). Each runs against a real sluiced on the memory store, once per
// transport in interopTransports.

// interopTransports are the -rls-transport values each case runs against.
var interopTransports = []string{"lean", "grpc"}

// interopYAML is the rate limit configuration of the tests. Each test's
// keys are fresh, so that what a call's answer says (remaining, codes)
// does not depend on where the clock is in a window: "user" counts each
// value apart, "blocked" denies every request and "load" is unlimited
// (always OK, whatever the clock: the loads test the transport).
const interopYAML = `domain: interop
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: load
    value: never
    rate_limit: {unlimited: true}
`

const (
	interopRLSPath    = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	interopHealthPath = "/grpc.health.v1.Health/Check"
	interopService    = "envoy.service.ratelimit.v3.RateLimitService"
)

// TestE2EGRPCCore calls the service with gRPC's C core (Python's grpcio):
// raw request bytes marshalled here go out through a channel with no
// serializers, and the response bytes are decoded here.
func TestE2EGRPCCore(t *testing.T) {
	python := interopPython(t)
	bin := interopSluiced(t)
	for _, tr := range interopTransports {
		t.Run(tr, func(t *testing.T) {
			n := startInteropNode(t, bin, tr)
			testGRPCCore(t, python, n)
		})
	}
}

func testGRPCCore(t *testing.T, python string, n *interopNode) {
	big := strings.Repeat("v", 3000)
	// 30 descriptors of 3000-byte values: a message past the 65535-byte
	// initial flow-control window, so the server must open its window.
	var large []*ratelimitv3.RateLimitDescriptor
	for i := range 30 {
		large = append(large, desc("user=large-"+strconv.Itoa(i)+big))
	}
	// Past the service's 256 KiB bound on messages.
	var oversized []*ratelimitv3.RateLimitDescriptor
	for i := range 64 {
		oversized = append(oversized, desc("user=over-"+strconv.Itoa(i)+strings.Repeat("o", 2100), "x="+strings.Repeat("o", 2100)))
	}
	var concurrent []string
	for i := range 200 {
		concurrent = append(concurrent, interopRequest(t, &rlsv3.RateLimitRequest{Domain: "interop",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=conc-" + strconv.Itoa(i))}, HitsAddend: uint32(i%10 + 1)}))
	}
	health := func(service string) string { return interopRequest(t, &healthpb.HealthCheckRequest{Service: service}) }
	plan := interopPlan{Target: n.rls, Calls: []interopCall{
		{Name: "rls", Method: interopRLSPath, Requests: []string{
			interopRequest(t, &rlsv3.RateLimitRequest{Domain: "interop", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=core-a")}, HitsAddend: 4}),
			interopRequest(t, &rlsv3.RateLimitRequest{Domain: "interop", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=core-b"), desc("blocked=x")}}),
			interopRequest(t, &rlsv3.RateLimitRequest{Domain: "interop", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=core-c")}, HitsAddend: 11}),
		}},
		{Name: "health", Method: interopHealthPath, Requests: []string{health(""), health(interopService), health("no.such.Service")}},
		{Name: "unknown", Method: "/envoy.service.ratelimit.v3.RateLimitService/NoSuchMethod", Requests: []string{""}},
		{Name: "unknown-service", Method: "/no.such.Service/Call", Requests: []string{""}},
		{Name: "invalid", Method: interopRLSPath, Requests: []string{
			interopRequest(t, &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=core-invalid")}}),
		}},
		{Name: "oversized", Method: interopRLSPath, Requests: []string{
			interopRequest(t, &rlsv3.RateLimitRequest{Domain: "interop", Descriptors: oversized}),
		}},
		{Name: "concurrent", Method: interopRLSPath, Requests: concurrent},
		{Name: "deadline", Method: interopRLSPath, Timeout: 30, Requests: []string{
			interopRequest(t, &rlsv3.RateLimitRequest{Domain: "interop", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=core-deadline")}}),
		}},
		// A deadline that has passed, or nearly, by the time the call
		// reaches the server: the client may cancel it (RST_STREAM) at any
		// point, and the calls after it must not notice.
		{Name: "expiring", Method: interopRLSPath, Timeout: 1e-6, Requests: []string{
			interopRequest(t, &rlsv3.RateLimitRequest{Domain: "interop", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=core-expiring")}}),
		}},
		{Name: "large", Method: interopRLSPath, Requests: []string{
			interopRequest(t, &rlsv3.RateLimitRequest{Domain: "interop", Descriptors: large}),
		}},
		{Name: "metadata", Method: interopRLSPath, Metadata: [][2]string{{"x-request-id", "interop-1"}, {"x-envoy-original-path", "/a?b=c"}},
			Requests: []string{
				interopRequest(t, &rlsv3.RateLimitRequest{Domain: "interop", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=core-metadata")}, HitsAddend: 2}),
			}},
		// Compressed messages (gRPC's C core sends one compressed when
		// that makes it smaller, as here): neither transport decompresses,
		// and both say so.
		{Name: "gzip", Method: interopRLSPath, Compression: "gzip", Requests: []string{
			interopRequest(t, &rlsv3.RateLimitRequest{Domain: "interop", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=core-gzip" + big)}}),
		}},
		{Name: "deflate", Method: interopRLSPath, Compression: "deflate", Requests: []string{
			interopRequest(t, &rlsv3.RateLimitRequest{Domain: "interop", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=core-deflate" + big)}}),
		}},
		{Name: "after", Method: interopRLSPath, Requests: []string{
			interopRequest(t, &rlsv3.RateLimitRequest{Domain: "interop", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=core-after")}}),
		}},
	}}
	got := runInteropPython(t, python, plan)

	rls := got.ok(t, "rls")
	interopWant(t, "user=core-a hits 4", rls[0], "OK: OK", 6)
	interopWant(t, "user=core-b, blocked=x", rls[1], "OVER: OK OVER", 9)
	interopWant(t, "user=core-c hits 11", rls[2], "OVER: OVER", 0)
	if l := rls[0].GetStatuses()[0].GetCurrentLimit(); l.GetRequestsPerUnit() != 10 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
		t.Errorf("user=core-a: current_limit %v, want 10 per HOUR", l)
	}
	if len(rls[0].GetResponseHeadersToAdd()) == 0 {
		t.Errorf("user=core-a: no response_headers_to_add with -rls-headers")
	}

	hs := got.results(t, "health", 3)
	for i, want := range []string{"SERVING", "SERVING"} {
		var h healthpb.HealthCheckResponse
		if hs[i].Code != "OK" {
			t.Errorf("health %d: %s %s, want OK", i, hs[i].Code, hs[i].Details)
		} else if err := proto.Unmarshal(hs[i].bytes(t), &h); err != nil || h.GetStatus().String() != want {
			t.Errorf("health %d: %v %v, want %s", i, h.GetStatus(), err, want)
		}
	}
	if hs[2].Code != "NOT_FOUND" {
		t.Errorf("health of an unknown service: %s %q, want NOT_FOUND", hs[2].Code, hs[2].Details)
	}
	for _, name := range []string{"unknown", "unknown-service"} {
		if r := got.results(t, name, 1)[0]; r.Code != "UNIMPLEMENTED" {
			t.Errorf("%s: %s %q, want UNIMPLEMENTED", name, r.Code, r.Details)
		}
	}
	if r := got.results(t, "invalid", 1)[0]; r.Code != "INVALID_ARGUMENT" || !strings.Contains(r.Details, "domain") {
		t.Errorf("no domain: %s %q, want INVALID_ARGUMENT naming domain", r.Code, r.Details)
	}
	if r := got.results(t, "oversized", 1)[0]; r.Code != "RESOURCE_EXHAUSTED" {
		t.Errorf("a message past 256 KiB: %s %q, want RESOURCE_EXHAUSTED", r.Code, r.Details)
	}
	// Each concurrent answer is its own request's: key conc-i was charged
	// i%10+1, so has 10-(i%10+1) left.
	for i, r := range got.ok(t, "concurrent") {
		interopWant(t, "conc-"+strconv.Itoa(i), r, "OK: OK", uint32(10-(i%10+1)))
	}
	interopWant(t, "deadline", got.ok(t, "deadline")[0], "OK: OK", 9)
	if r := got.results(t, "expiring", 1)[0]; r.Code != "OK" && r.Code != "DEADLINE_EXCEEDED" {
		t.Errorf("expiring: %s %q, want OK or DEADLINE_EXCEEDED", r.Code, r.Details)
	} else {
		t.Logf("a call with a 1 µs deadline: %s", r.Code)
	}
	lr := got.ok(t, "large")[0]
	if len(lr.GetStatuses()) != 30 {
		t.Errorf("large: %d statuses, want 30", len(lr.GetStatuses()))
	}
	interopWant(t, "large", lr, "OK: OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK OK", 9)
	interopWant(t, "metadata", got.ok(t, "metadata")[0], "OK: OK", 8)
	for _, name := range []string{"gzip", "deflate"} {
		if r := got.results(t, name, 1)[0]; r.Code != "UNIMPLEMENTED" {
			t.Errorf("a message compressed with %s: %s %q, want UNIMPLEMENTED", name, r.Code, r.Details)
		}
	}
	interopWant(t, "after", got.ok(t, "after")[0], "OK: OK", 9)
}

// TestE2ENghttp sends gRPC requests with nghttp (h2c with prior knowledge):
// the request body is a gRPC message (the 5-byte prefix and the request),
// and the answer must be :status 200, one message, and grpc-status in the
// trailers.
func TestE2ENghttp(t *testing.T) {
	nghttp := lookInteropBin(t, "nghttp", "nghttp2-client")
	bin := interopSluiced(t)
	for _, tr := range interopTransports {
		t.Run(tr, func(t *testing.T) {
			n := startInteropNode(t, bin, tr)
			dir := t.TempDir()
			url := "http://" + n.rls

			// One call, and the same call on 8 streams of one connection
			// (1 hit each, never past 10 in any window).
			body := interopFrame(interopMarshal(t, &rlsv3.RateLimitRequest{Domain: "interop",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=nghttp-1")}, HitsAddend: 3}))
			ss := runNghttp(t, nghttp, dir, body, url+interopRLSPath)
			if len(ss) != 1 {
				t.Fatalf("%d streams, want 1", len(ss))
			}
			interopWant(t, "nghttp user=nghttp-1 hits 3", ss[0].rls(t), "OK: OK", 7)

			body = interopFrame(interopMarshal(t, &rlsv3.RateLimitRequest{Domain: "interop",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=nghttp-m")}}))
			ss = runNghttp(t, nghttp, dir, body, "-m", "8", url+interopRLSPath)
			if len(ss) != 8 {
				t.Fatalf("-m 8: %d streams, want 8", len(ss))
			}
			for _, s := range ss {
				if codes := codesOf(s.rls(t)); codes != "OK: OK" {
					t.Errorf("-m 8, stream %d: %s, want OK: OK", s.id, codes)
				}
			}

			// A 90 KB request (past the initial window: the server must
			// send WINDOW_UPDATE) and a 255-byte stream window for the
			// answer (the server must split its DATA and wait for the
			// client's WINDOW_UPDATEs).
			var large []*ratelimitv3.RateLimitDescriptor
			for i := range 30 {
				large = append(large, desc("user=nghttp-large-"+strconv.Itoa(i)+strings.Repeat("v", 3000)))
			}
			body = interopFrame(interopMarshal(t, &rlsv3.RateLimitRequest{Domain: "interop", Descriptors: large}))
			ss = runNghttp(t, nghttp, dir, body, "-w", "8", url+interopRLSPath)
			if len(ss) != 1 {
				t.Fatalf("large: %d streams, want 1", len(ss))
			}
			lr := ss[0].rls(t)
			if len(lr.GetStatuses()) != 30 || lr.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Errorf("large: %s, want 30 statuses OK", codesOf(lr))
			}
			t.Logf("large: an answer of %d bytes in DATA frames of %v bytes", len(ss[0].data), ss[0].frameSizes)
			if ss[0].dataFrames < 2 {
				t.Errorf("large: the answer came in %d DATA frame(s) on a 255-byte window", ss[0].dataFrames)
			}
			for _, d := range ss[0].frameSizes {
				if d > 255 {
					t.Errorf("large: a DATA frame of %d bytes on a 255-byte stream window", d)
				}
			}

			// The health service: an empty request, SERVING.
			ss = runNghttp(t, nghttp, dir, interopFrame(nil), url+interopHealthPath)
			var h healthpb.HealthCheckResponse
			if err := proto.Unmarshal(ss[0].message(t), &h); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("health: %v %v, want SERVING", h.GetStatus(), err)
			}

			// Padded DATA frames (-b: up to 100 bytes of padding), which
			// the server must strip.
			ss = runNghttp(t, nghttp, dir, interopFrame(nil), "-b", "100", url+interopHealthPath)
			if err := proto.Unmarshal(ss[0].message(t), &h); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("health, padded: %v %v, want SERVING", h.GetStatus(), err)
			}

			// A header block of some 18 KB (--continuation: HEADERS and
			// CONTINUATION frames): served, or refused as past the server's
			// bound on header lists (grpc-status 8, RESOURCE_EXHAUSTED, with
			// a message), never a reset or a broken connection.
			ss = runNghttp(t, nghttp, dir, interopFrame(nil), "--continuation", url+interopHealthPath)
			switch st := ss[0].grpcStatus(t); st {
			case "0":
				if err := proto.Unmarshal(ss[0].message(t), &h); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
					t.Errorf("health, --continuation: %v %v, want SERVING", h.GetStatus(), err)
				}
			case "8":
				if msg := ss[0].blocks[len(ss[0].blocks)-1].fields["grpc-message"]; !strings.Contains(msg, "header") {
					t.Errorf("--continuation: grpc-status 8 with grpc-message %q, want one naming the header list bound", msg)
				}
			default:
				t.Errorf("--continuation: grpc-status %s, want 0 or 8", st)
			}

			// An unknown method: grpc-status 12 (UNIMPLEMENTED), no message.
			ss = runNghttp(t, nghttp, dir, body, url+"/envoy.service.ratelimit.v3.RateLimitService/NoSuchMethod")
			if st := ss[0].grpcStatus(t); st != "12" {
				t.Errorf("unknown method: grpc-status %s, want 12", st)
			}
			if len(ss[0].data) != 0 {
				t.Errorf("unknown method: %d bytes of DATA, want none", len(ss[0].data))
			}
		})
	}
}

// TestE2EH2load: bounded loads from h2load on an unlimited descriptor, 4
// connections of 32 concurrent streams, then 2 of 16 with 63-byte
// stream windows (each answer split over several DATA frames, sent as the
// client opens its window): every request completes 2xx, none failed,
// errored or reset, the node counts each as an OK call, and it answers a
// normal call afterwards.
func TestE2EH2load(t *testing.T) {
	h2load := lookInteropBin(t, "h2load", "nghttp2-client")
	bin := interopSluiced(t)
	for _, tr := range interopTransports {
		t.Run(tr, func(t *testing.T) {
			n := startInteropNode(t, bin, tr)
			body := filepath.Join(t.TempDir(), "body")
			if err := os.WriteFile(body, interopFrame(interopMarshal(t, &rlsv3.RateLimitRequest{Domain: "interop",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("load=never")}})), 0o644); err != nil {
				t.Fatal(err)
			}
			runH2load(t, n, h2load, 20000, "-c", "4", "-m", "32", "-d", body)
			runH2load(t, n, h2load, 2000, "-c", "2", "-m", "16", "-w", "6", "-d", body)

			conn, err := grpc.NewClient(n.rls, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "interop",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=after-load")}, HitsAddend: 5})
			if err != nil {
				t.Fatalf("a call after the load: %v", err)
			}
			interopWant(t, "after the load", res, "OK: OK", 5)
		})
	}
}

// runH2load runs h2load for requests ShouldRateLimit calls with gRPC's
// headers and args, and checks that each completed 2xx and was answered OK.
func runH2load(t *testing.T, n *interopNode, h2load string, requests int, args ...string) {
	t.Helper()
	okBefore := n.metric(t, `sluice_rls_calls_total{code="OK"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	full := append([]string{"-n", strconv.Itoa(requests), "-H", "content-type: application/grpc", "-H", "te: trailers"}, args...)
	full = append(full, "http://"+n.rls+interopRLSPath)
	out, err := exec.CommandContext(ctx, h2load, full...).CombinedOutput()
	if err != nil {
		t.Fatalf("h2load %s: %v\n%s", strings.Join(full, " "), err, out)
	}
	want := fmt.Sprintf("requests: %d total, %d started, %d done, %d succeeded, 0 failed, 0 errored, 0 timeout", requests, requests, requests, requests)
	if !bytes.Contains(out, []byte(want)) {
		t.Errorf("h2load %s: want %q in\n%s", strings.Join(full, " "), want, out)
	}
	if want := fmt.Sprintf("status codes: %d 2xx, 0 3xx, 0 4xx, 0 5xx", requests); !bytes.Contains(out, []byte(want)) {
		t.Errorf("h2load %s: want %q in\n%s", strings.Join(full, " "), want, out)
	}
	// h2load does not read trailers: the node's own count says every
	// call was answered OK (grpc-status 0 and code OK).
	if ok := n.metric(t, `sluice_rls_calls_total{code="OK"}`) - okBefore; ok != requests {
		t.Errorf("h2load %s: sluice_rls_calls_total{code=\"OK\"} grew by %d, want %d\n%s", strings.Join(full, " "), ok, requests, out)
	}
	if testing.Verbose() {
		t.Logf("h2load %s:\n%s", strings.Join(full, " "), out)
	}
}

// interopNode is a sluiced process: its rate limit service and HTTP API.
type interopNode struct {
	rls, http string
}

// metric returns the value of one series of the node's /metrics (0 when
// absent).
func (n *interopNode) metric(t *testing.T, series string) int {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	res, err := c.Get("http://" + n.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return int(f)
		}
	}
	return 0
}

// startInteropNode starts sluiced on the memory store with interopYAML
// (and -rls-headers) on loopback ports, with -rls-transport transport and
// the flags extra, and stops it at cleanup.
func startInteropNode(t *testing.T, bin, transport string, extra ...string) *interopNode {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "ratelimit.yaml")
	if err := os.WriteFile(conf, []byte(interopYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	n := &interopNode{rls: interopFreeAddr(t), http: interopFreeAddr(t)}
	args := append([]string{"-listen", n.http, "-rls-listen", n.rls, "-rls-config", conf, "-rls-transport", transport,
		"-rls-headers", "-log-level", "warn"}, extra...)
	logPath := filepath.Join(dir, "sluiced.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			if waitErr != nil {
				t.Errorf("sluiced exit: %v", waitErr)
			}
		case <-time.After(20 * time.Second): // a hang guard
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("sluiced did not exit on SIGTERM")
		}
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("sluiced %s log:\n%s", strings.Join(args, " "), data)
		}
	})
	// Readiness: both ports accept connections (the configuration is
	// loaded before the service listens). Bounded by attempts.
	for _, addr := range []string{n.http, n.rls} {
		clocktest.EventuallyState(t, 10*time.Second, "sluiced to listen on "+addr, func() (bool, string) {
			select {
			case <-exited:
				data, _ := os.ReadFile(logPath)
				t.Fatalf("sluiced exited at start: %v\n%s", waitErr, data)
			default:
			}
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return false, err.Error()
			}
			c.Close()
			return true, ""
		})
	}
	return n
}

func interopFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

var interopBuild struct {
	once sync.Once
	bin  string
	err  error
}

// interopSluiced returns the sluiced binary: SLUICE_E2E_SLUICED (make e2e
// builds it), else built once here.
func interopSluiced(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLUICE_E2E_SLUICED"); p != "" {
		return p
	}
	interopBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "sluiced-e2e")
		if err != nil {
			interopBuild.err = err
			return
		}
		interopBuild.bin = filepath.Join(dir, "sluiced")
		cmd := exec.Command("go", "build", "-tags", "vtprotobuf", "-o", interopBuild.bin, "./cmd/sluiced")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			interopBuild.err = fmt.Errorf("go build ./cmd/sluiced: %v\n%s", err, out)
		}
	})
	if interopBuild.err != nil {
		t.Fatal(interopBuild.err)
	}
	return interopBuild.bin
}

func lookInteropBin(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed: make e2e installs it (apt-get install %s)", name, pkg)
	}
	return p
}

// interopPython returns a Python that imports grpc: SLUICE_E2E_PYTHON,
// else python3 on the PATH, else Debian's /usr/bin/python3 (where
// python3-grpcio installs, when the PATH's python3 is another one).
func interopPython(t *testing.T) string {
	t.Helper()
	cands := []string{"python3", "/usr/bin/python3"}
	if p := os.Getenv("SLUICE_E2E_PYTHON"); p != "" {
		cands = []string{p}
	}
	for _, c := range cands {
		if p, err := exec.LookPath(c); err == nil && exec.Command(p, "-c", "import grpc").Run() == nil {
			return p
		}
	}
	t.Fatalf("no python3 that imports grpc among %v: make e2e installs it (apt-get install python3-grpcio)", cands)
	return ""
}

// interopPlan is the input of testdata/grpc-client.py.
type interopPlan struct {
	Target string        `json:"target"`
	Calls  []interopCall `json:"calls"`
	TLS    *interopTLS   `json:"tls,omitempty"`
	NoWait bool          `json:"no_wait,omitempty"` // call at once: a refused handshake fails the calls
}

// interopTLS is the client's TLS: the CA it verifies the server with, and
// its certificate and key (PEM) for mTLS.
type interopTLS struct {
	CA   string `json:"ca"`
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
}

type interopCall struct {
	Name        string      `json:"name"`
	Method      string      `json:"method"`
	Requests    []string    `json:"requests"` // base64
	Timeout     float64     `json:"timeout,omitempty"`
	Metadata    [][2]string `json:"metadata,omitempty"`
	Compression string      `json:"compression,omitempty"`
}

type interopOutcome struct {
	Calls []struct {
		Name    string          `json:"name"`
		Results []interopResult `json:"results"`
	} `json:"calls"`
}

type interopResult struct {
	Code     string `json:"code"`
	Details  string `json:"details"`
	Response string `json:"response"`
}

func (r interopResult) bytes(t *testing.T) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(r.Response)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// results returns the results of the call named name, which must have n.
func (o *interopOutcome) results(t *testing.T, name string, n int) []interopResult {
	t.Helper()
	for _, c := range o.Calls {
		if c.Name == name {
			if len(c.Results) != n {
				t.Fatalf("%s: %d results, want %d", name, len(c.Results), n)
			}
			return c.Results
		}
	}
	t.Fatalf("no call %s in the client's outcome", name)
	return nil
}

// ok returns the responses of the call named name, each of which must be
// OK.
func (o *interopOutcome) ok(t *testing.T, name string) []*rlsv3.RateLimitResponse {
	t.Helper()
	var res []*rlsv3.RateLimitResponse
	for _, c := range o.Calls {
		if c.Name != name {
			continue
		}
		for i, r := range c.Results {
			if r.Code != "OK" {
				t.Fatalf("%s #%d: %s %q, want OK", name, i, r.Code, r.Details)
			}
			var m rlsv3.RateLimitResponse
			if err := proto.Unmarshal(r.bytes(t), &m); err != nil {
				t.Fatalf("%s #%d: %v", name, i, err)
			}
			res = append(res, &m)
		}
		return res
	}
	t.Fatalf("no call %s in the client's outcome", name)
	return nil
}

func runInteropPython(t *testing.T, python string, plan interopPlan) *interopOutcome {
	t.Helper()
	in, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, python, filepath.Join("testdata", "grpc-client.py"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("grpc-client.py: %v\n%s", err, stderr.Bytes())
	}
	var o interopOutcome
	if err := json.Unmarshal(out, &o); err != nil {
		t.Fatalf("grpc-client.py's output: %v\n%s\n%s", err, out, stderr.Bytes())
	}
	return &o
}

func interopMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// interopRequest is m marshalled, in base64 for grpc-client.py.
func interopRequest(t *testing.T, m proto.Message) string {
	t.Helper()
	return base64.StdEncoding.EncodeToString(interopMarshal(t, m))
}

// interopFrame is msg as one gRPC message: no compression, its length,
// itself.
func interopFrame(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// interopWant checks a response's codes and its first status's
// limit_remaining.
func interopWant(t *testing.T, what string, r *rlsv3.RateLimitResponse, codes string, remaining uint32) {
	t.Helper()
	if got := codesOf(r); got != codes {
		t.Errorf("%s: %s, want %s", what, got, codes)
		return
	}
	if got := r.GetStatuses()[0].GetLimitRemaining(); got != remaining {
		t.Errorf("%s: limit_remaining %d, want %d", what, got, remaining)
	}
}

// nghttpStream is what nghttp -v showed of one stream.
type nghttpStream struct {
	id         int
	blocks     []nghttpBlock // header blocks, in order
	data       []byte
	dataFrames int
	frameSizes []int
	reset      string // the RST_STREAM error code received, if any
}

type nghttpBlock struct {
	fields    map[string]string
	endStream bool
}

// grpcStatus checks the stream's shape, the one of a gRPC answer:
// :status 200 with content-type application/grpc first, then (after any
// DATA) a last block that ends the stream with grpc-status, whose value it
// returns. A trailers-only answer is one block with both.
func (s *nghttpStream) grpcStatus(t *testing.T) string {
	t.Helper()
	// A server may end a stream whose request it has not read to the end
	// with RST_STREAM NO_ERROR once it has answered (RFC 9113 8.1).
	if s.reset != "" && (!strings.Contains(s.reset, "NO_ERROR") || len(s.blocks) == 0 || !s.blocks[len(s.blocks)-1].endStream) {
		t.Fatalf("stream %d reset: %s", s.id, s.reset)
	}
	if len(s.blocks) == 0 || len(s.blocks) > 2 {
		t.Fatalf("stream %d: %d header blocks, want 1 or 2", s.id, len(s.blocks))
	}
	h, tr := s.blocks[0], s.blocks[len(s.blocks)-1]
	if h.fields[":status"] != "200" || !strings.HasPrefix(h.fields["content-type"], "application/grpc") {
		t.Errorf("stream %d: headers %v, want :status 200, content-type application/grpc", s.id, h.fields)
	}
	if !tr.endStream {
		t.Errorf("stream %d: the last header block does not end the stream", s.id)
	}
	st, ok := tr.fields["grpc-status"]
	if !ok {
		t.Fatalf("stream %d: no grpc-status in the trailers %v", s.id, tr.fields)
	}
	return st
}

// message checks that the stream is a gRPC answer with grpc-status 0 and
// one message, and returns the message.
func (s *nghttpStream) message(t *testing.T) []byte {
	t.Helper()
	if st := s.grpcStatus(t); st != "0" {
		t.Fatalf("stream %d: grpc-status %s (%s), want 0", s.id, st, s.blocks[len(s.blocks)-1].fields["grpc-message"])
	}
	if len(s.blocks) != 2 {
		t.Fatalf("stream %d: a trailers-only answer with grpc-status 0", s.id)
	}
	d := s.data
	if len(d) < 5 || d[0] != 0 || int(binary.BigEndian.Uint32(d[1:5])) != len(d)-5 {
		t.Fatalf("stream %d: DATA is not one uncompressed gRPC message: % x", s.id, d[:min(len(d), 16)])
	}
	return d[5:]
}

func (s *nghttpStream) rls(t *testing.T) *rlsv3.RateLimitResponse {
	t.Helper()
	var m rlsv3.RateLimitResponse
	if err := proto.Unmarshal(s.message(t), &m); err != nil {
		t.Fatalf("stream %d: %v", s.id, err)
	}
	return &m
}

// nghttp -v's output: header fields received, the frames received, and
// the received DATA written raw to stdout just before the line of its
// frame.
var (
	nghttpEvent = regexp.MustCompile(`\[ *[0-9.]+\] recv (?:\(stream_id=(\d+)(?:, sensitive)?\) (:?[^:\n]+): ?([^\n]*)\n|(HEADERS|DATA|RST_STREAM|GOAWAY) frame <length=(\d+), flags=0x([0-9a-f]+), stream_id=(\d+)>\n(?: *; [^\n]*\n)*(?: *\(([^\n]*)\)\n)?)`)
)

// runNghttp runs nghttp -v (h2c with prior knowledge) POSTing body with
// gRPC's headers, plus args (options, then the URL), and returns the
// streams it saw, in order of their ids.
func runNghttp(t *testing.T, nghttp, dir string, body []byte, args ...string) []*nghttpStream {
	t.Helper()
	f := filepath.Join(dir, "body")
	if err := os.WriteFile(f, body, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	full := append([]string{"-v", "-d", f, "-H", "content-type: application/grpc", "-H", "te: trailers"}, args...)
	out, err := exec.CommandContext(ctx, nghttp, full...).CombinedOutput()
	if err != nil {
		t.Fatalf("nghttp %s: %v\n%s", strings.Join(full, " "), err, out)
	}
	streams := map[int]*nghttpStream{}
	stream := func(id string) *nghttpStream {
		n, _ := strconv.Atoi(id)
		s := streams[n]
		if s == nil {
			s = &nghttpStream{id: n}
			streams[n] = s
		}
		return s
	}
	pending := map[int]map[string]string{}
	for _, m := range nghttpEvent.FindAllSubmatchIndex(out, -1) {
		g := func(i int) string {
			if m[2*i] < 0 {
				return ""
			}
			return string(out[m[2*i]:m[2*i+1]])
		}
		if g(1) != "" { // a header field
			s := stream(g(1))
			if pending[s.id] == nil {
				pending[s.id] = map[string]string{}
			}
			pending[s.id][g(2)] = g(3)
			continue
		}
		if g(7) == "0" {
			if g(4) == "GOAWAY" && !strings.Contains(g(8), "NO_ERROR") {
				t.Errorf("GOAWAY received: %s\n%s", g(8), out)
			}
			continue
		}
		s := stream(g(7))
		flags, _ := strconv.ParseUint(g(6), 16, 8)
		switch g(4) {
		case "HEADERS":
			s.blocks = append(s.blocks, nghttpBlock{fields: pending[s.id], endStream: flags&1 != 0})
			delete(pending, s.id)
		case "DATA":
			n, _ := strconv.Atoi(g(5))
			start := m[0] - n
			if start < 0 {
				t.Fatalf("nghttp's output: DATA of %d bytes before offset %d", n, m[0])
			}
			s.data = append(s.data, out[start:m[0]]...)
			s.dataFrames++
			s.frameSizes = append(s.frameSizes, n)
		case "RST_STREAM":
			s.reset = g(8)
		}
	}
	var res []*nghttpStream
	for id := 1; id < 1<<16; id += 2 {
		if s, ok := streams[id]; ok {
			res = append(res, s)
		}
	}
	if len(res) == 0 {
		t.Fatalf("nghttp %s: no stream in its output\n%s", strings.Join(full, " "), out)
	}
	return res
}
