package rls_test

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/summerwind/h2spec/config"
	"github.com/summerwind/h2spec/generic"
	"github.com/summerwind/h2spec/hpack"
	"github.com/summerwind/h2spec/http2"
	"github.com/summerwind/h2spec/spec"

	"github.com/sluicehq/sluice/node/rls"
)

// h2specNotRequired are h2spec's cases that ask more of a gRPC server than
// RFC 9113 and the gRPC protocol do, skipped for every transport.
var h2specNotRequired = map[string]string{
	"generic/2/2":     "wants a DATA frame in the answer to its GET /: a gRPC server answers it with headers only (Trailers-Only)",
	"generic/2/3":     "wants a DATA frame in the answer to its GET /: a gRPC server answers it with headers only (Trailers-Only)",
	"http2/5.1.2/1":   "holds its streams open with a window of 0, but they are GET / ended by their HEADERS, which a gRPC server answers at once with headers only (no window holds them back): they close and never reach SETTINGS_MAX_CONCURRENT_STREAMS; TestTransportStreamLimit holds its streams open by leaving the requests unfinished",
	"http2/8.1.2.2/2": "wants RST_STREAM for a malformed request; RFC 9113 8.1.1 lets a server answer it and close the stream",
	"http2/8.1.2.3/1": "wants RST_STREAM for a malformed request; RFC 9113 8.1.1 lets a server answer it and close the stream",
	"http2/8.1.2.3/2": "wants RST_STREAM for a malformed request; RFC 9113 8.1.1 lets a server answer it and close the stream",
	"http2/8.1.2.3/3": "wants RST_STREAM for a malformed request; RFC 9113 8.1.1 lets a server answer it and close the stream",
	"http2/8.1.2.3/4": "wants RST_STREAM for a malformed request; RFC 9113 8.1.1 lets a server answer it and close the stream",
}

// h2specKnown are the cases a transport is known to fail, and why.
var h2specKnown = map[rls.Transport]map[string]string{
	rls.TransportGRPC: {
		"http2/5.1/1":     "grpc-go ignores DATA on an idle stream",
		"http2/5.1/2":     "grpc-go ignores RST_STREAM on an idle stream",
		"http2/5.1/3":     "grpc-go ignores WINDOW_UPDATE on an idle stream",
		"http2/5.1/5":     "grpc-go ignores DATA on a half-closed (remote) stream",
		"http2/5.1/8":     "grpc-go ignores DATA on a stream closed by RST_STREAM",
		"http2/5.1/11":    "grpc-go ignores DATA on a closed stream",
		"http2/6.1/2":     "grpc-go ignores DATA on a stream neither open nor half-closed (local)",
		"http2/5.3.1/1":   "grpc-go ignores a HEADERS frame's dependency on its own stream",
		"http2/5.3.1/2":   "grpc-go ignores a PRIORITY frame's dependency on its own stream",
		"http2/6.4/2":     "grpc-go ignores RST_STREAM on an idle stream",
		"http2/6.5.2/1":   "grpc-go accepts SETTINGS_ENABLE_PUSH other than 0 or 1",
		"http2/6.5.2/3":   "grpc-go accepts SETTINGS_MAX_FRAME_SIZE below 16384",
		"http2/6.5.2/4":   "grpc-go accepts SETTINGS_MAX_FRAME_SIZE above 2^24-1",
		"http2/6.9.1/2":   "grpc-go lets WINDOW_UPDATEs take the connection window past 2^31-1",
		"http2/6.9.1/3":   "grpc-go ignores a stream window past 2^31-1 (see TestTransportWindowOverflow)",
		"http2/8.1.2.6/1": "grpc-go does not check content-length against the DATA",
		"http2/8.1.2.6/2": "grpc-go does not check content-length against the DATA",
		"http2/8.2/1":     "grpc-go ignores a PUSH_PROMISE from the client",
	},
}

// TestH2Spec runs h2spec (github.com/summerwind/h2spec: HTTP/2 and HPACK
// conformance, in process, each case on a connection of its own) against
// each transport, but the cases above. A case that passes takes about a
// millisecond; its timeout is the hang guard, which only a failing case
// reaches.
func TestH2Spec(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, transportYAML, withTransport(tr))
		host, port, err := net.SplitHostPort(r.addr)
		if err != nil {
			t.Fatal(err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			t.Fatal(err)
		}
		groups := []*spec.TestGroup{generic.Spec(), http2.Spec(), hpack.Spec()}
		c := &config.Config{Host: host, Port: p, Path: "/", Timeout: hangGuard, MaxHeaderLen: 4000}
		h2specCases(groups, func(id string, _ *spec.TestCase) {
			if h2specNotRequired[id] == "" && h2specKnown[tr][id] == "" {
				c.Sections = append(c.Sections, id)
			}
		})
		if len(c.Sections) < 100 {
			t.Fatalf("only %d cases of h2spec to run", len(c.Sections))
		}
		for _, g := range groups {
			g.Test(c) // prints its progress on stdout, shown with -v
		}
		ran := 0
		h2specCases(groups, func(id string, tc *spec.TestCase) {
			if tc.Result == nil {
				if h2specNotRequired[id] == "" && h2specKnown[tr][id] == "" {
					t.Errorf("h2spec %s (%s) did not run", id, tc.Desc)
				}
				return
			}
			ran++
			if tc.Result.Failed && !h2specResetIsClose(tc.Result.Error) {
				t.Errorf("h2spec %s (%s): %v", id, tc.Desc, tc.Result.Error)
			}
		})
		if ran != len(c.Sections) {
			t.Errorf("%d cases of h2spec ran, want %d", ran, len(c.Sections))
		}
	})
}

// h2specCases calls f with the id of each case of groups that runs by
// default (not the strict ones), as h2spec's sections name them.
func h2specCases(groups []*spec.TestGroup, f func(id string, tc *spec.TestCase)) {
	for _, g := range groups {
		for i, tc := range g.Tests {
			if !tc.Strict {
				f(g.ID()+"/"+strconv.Itoa(i+1), tc)
			}
		}
		h2specCases(g.Groups, f)
	}
}

// h2specResetIsClose tells a result that h2spec means to pass: a
// connection reset where it expects the connection closed (it compares
// the read error with syscall.ECONNRESET, which Go now wraps in an
// *os.SyscallError, so that a server closing with h2spec's bytes unread,
// as RFC 9113 allows, fails by chance).
func h2specResetIsClose(err error) bool {
	var te *spec.TestError
	if !errors.As(err, &te) || !strings.Contains(te.Actual, "connection reset by peer") {
		return false
	}
	for _, e := range te.Expected {
		if e == spec.ExpectedConnectionClosed {
			return true
		}
	}
	return false
}
