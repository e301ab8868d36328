package rls

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/rules"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// TestLeanHeaderBlocks: the constant header blocks decode to their fields,
// each a never-indexed literal, so that a block leaves the peer's dynamic
// table alone (they decode with no dynamic table at all) and is valid on
// every connection; grpc-message is percent-encoded.
func TestLeanHeaderBlocks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block []byte
		want  string
	}{
		{"response headers", leanResponseHeaders, ":status=200 content-type=application/grpc"},
		{"OK trailers", leanTrailersOK, "grpc-status=0"},
		{"error", trailersOnly(200, codes.Internal, "100% \u00e9\n"), ":status=200 content-type=application/grpc grpc-status=13 grpc-message=100%25 %C3%A9%0A"},
		{"HTTP 415", trailersOnly(415, codes.Internal, "x"), ":status=415 content-type=application/grpc grpc-status=13 grpc-message=x"},
		{"long message", trailersOnly(200, codes.Unimplemented, strings.Repeat("\u00e9", 5000)), ":status=200 content-type=application/grpc grpc-status=12 grpc-message=" + strings.Repeat("%C3%A9", maxStatusMessage/6) + "%C3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			d := hpack.NewDecoder(0, func(f hpack.HeaderField) {
				if !f.Sensitive {
					t.Errorf("%s is not a never-indexed literal", f.Name)
				}
				got = append(got, f.Name+"="+f.Value)
			})
			if _, err := d.Write(tc.block); err != nil {
				t.Fatal(err)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if s := strings.Join(got, " "); s != tc.want {
				t.Errorf("fields\n%s\nwant\n%s", s, tc.want)
			}
		})
	}
}

// testConn is a TransportLean connection whose frames the test feeds from
// in and whose writes stay in wbuf (as though someone were writing).
func testConn(t testing.TB, in *bytes.Buffer, opts ...func(*ServerConfig)) *leanConn {
	cfg := ServerConfig{Transport: TransportLean}
	for _, o := range opts {
		o(&cfg)
	}
	s := NewServer(cfg)
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close(); s.lean.close(context.Background()) })
	c := newLeanConn(s.lean, a)
	c.fr = http2.NewFramer(io.Discard, in)
	c.writing = true
	return c
}

// frames lists the frames in c.wbuf, and empties it.
func frames(t testing.TB, c *leanConn) string {
	t.Helper()
	fr := http2.NewFramer(io.Discard, bytes.NewReader(c.wbuf))
	var out []string
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			out = append(out, fmt.Sprintf("DATA %d %d", f.StreamID, len(f.Data())))
		case *http2.HeadersFrame:
			s := fmt.Sprintf("HEADERS %d", f.StreamID)
			if f.StreamEnded() {
				s += " end"
			}
			if b := f.HeaderBlockFragment(); len(b) > 0 && b[0] == 0x20 {
				s += " size0"
			}
			out = append(out, s)
		case *http2.WindowUpdateFrame:
			out = append(out, fmt.Sprintf("WINDOW_UPDATE %d %d", f.StreamID, f.Increment))
		case *http2.SettingsFrame:
			out = append(out, "SETTINGS ack")
		default:
			out = append(out, f.Header().Type.String())
		}
	}
	c.wbuf = c.wbuf[:0]
	return strings.Join(out, ", ")
}

// sending puts a stream with a response of n bytes on c, as a worker does.
func sending(c *leanConn, id uint32, n int) *leanStream {
	st := &leanStream{c: c, id: id, out: make([]byte, n)}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.maxID = id
	st.state = streamSending
	c.streams[id] = st
	c.pushLocked(st)
	return st
}

// TestLeanFlowControl: responses are sent as far as the peer's stream and
// connection windows and its frame size allow, and the rest once a
// WINDOW_UPDATE or SETTINGS_INITIAL_WINDOW_SIZE makes room; consumed bytes
// go back to the peer in WINDOW_UPDATEs of a quarter of the window.
func TestLeanFlowControl(t *testing.T) {
	var in bytes.Buffer
	peer := http2.NewFramer(&in, nil)
	c := testConn(t, &in)
	step := func(want string) {
		t.Helper()
		if err := c.readFrame(false); err != nil {
			t.Fatal(err)
		}
		if got := frames(t, c); got != want {
			t.Errorf("frames %q, want %q", got, want)
		}
	}

	// The stream window.
	peer.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10}, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
	step("SETTINGS ack")
	sending(c, 1, 30)
	if got := frames(t, c); got != "HEADERS 1 size0, DATA 1 10" {
		t.Fatalf("frames %q", got)
	}
	peer.WriteWindowUpdate(1, 15)
	step("DATA 1 15")
	peer.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 20}) // +10 on every stream
	step("SETTINGS ack, DATA 1 5, HEADERS 1 end size0")
	if len(c.streams) != 0 || len(c.flow.blocked.s) != 0 {
		t.Errorf("a finished stream is left: %v %v", c.streams, c.flow.blocked.s)
	}

	// The connection window: 65535 - 30 left.
	peer.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	step("SETTINGS ack")
	sending(c, 3, 65535-30+7)
	if got := frames(t, c); got != "HEADERS 3 size0, DATA 3 16384, DATA 3 16384, DATA 3 16384, DATA 3 16353" {
		t.Fatalf("frames %q", got)
	}
	peer.WriteWindowUpdate(0, 5)
	step("DATA 3 5")
	peer.WriteWindowUpdate(0, 100)
	step("DATA 3 2, HEADERS 3 end size0")

	// Past 2^31-1: a connection error.
	peer.WriteWindowUpdate(0, maxWindow)
	var ce connError
	if err := c.readFrame(false); !errors.As(err, &ce) || ce.code != http2.ErrCodeFlowControl {
		t.Errorf("connection window past 2^31-1: %v, want FLOW_CONTROL_ERROR", err)
	}

	// The receive window, given back by quarters.
	c.wmu.Lock()
	c.recvAvail -= leanConnWindow / 4
	c.giveBackLocked(leanConnWindow/4 - 1)
	c.wmu.Unlock()
	if got := frames(t, c); got != "" {
		t.Errorf("gave back less than a quarter: %q", got)
	}
	c.wmu.Lock()
	c.giveBackLocked(1)
	c.wmu.Unlock()
	if got, want := frames(t, c), fmt.Sprintf("WINDOW_UPDATE 0 %d", leanConnWindow/4); got != want {
		t.Errorf("frames %q, want %q", got, want)
	}
	if c.recvAvail != leanConnWindow || c.unacked != 0 {
		t.Errorf("receive window %d, unacked %d", c.recvAvail, c.unacked)
	}
}

// TestLeanEarlyAnswer: a request refused by its headers (here an unknown
// method) gets a Trailers-Only answer once it ends, its DATA dropped,
// and no RST_STREAM; a header block of too many frames is a connection
// error.
func TestLeanEarlyAnswer(t *testing.T) {
	var in bytes.Buffer
	peer := http2.NewFramer(&in, nil)
	c := testConn(t, &in)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/nope.Service/Method"}, {"content-type", "application/grpc"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	block := hb.Bytes()
	peer.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true, EndStream: true})
	if err := c.readFrame(false); err != nil {
		t.Fatal(err)
	}
	if got := frames(t, c); got != "HEADERS 1 end" {
		t.Errorf("ended request: frames %q", got)
	}
	peer.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block, EndHeaders: true})
	peer.WriteData(3, false, []byte{0, 0, 0, 0, 1})
	peer.WriteData(3, true, []byte{7})
	for i, want := range []string{"", "", "HEADERS 3 end"} {
		if err := c.readFrame(false); err != nil {
			t.Fatal(err)
		}
		if got := frames(t, c); got != want {
			t.Errorf("open request, frame %d: frames %q, want %q", i+1, got, want)
		}
	}
	if len(c.streams) != 0 {
		t.Errorf("streams left: %v", c.streams)
	}

	peer.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: block[:1]})
	for range leanMaxHeaderFrames {
		peer.WriteContinuation(5, false, nil)
	}
	var err error
	for i := 0; i <= leanMaxHeaderFrames && err == nil; i++ {
		err = c.readFrame(false)
	}
	if ce := (connError{}); !errors.As(err, &ce) || ce.code != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("a header block of %d frames: %v, want ENHANCE_YOUR_CALM", leanMaxHeaderFrames+1, err)
	}
}

// heldEngine allows every request once release is closed.
type heldEngine struct{ release chan struct{} }

func (e *heldEngine) SetRLSRules(*rules.Set) {}

func (e *heldEngine) Decide(_ context.Context, b *engine.Batch) {
	<-e.release
	for i := range b.Items {
		b.Items[i].Decided, b.Items[i].Decision = true, lease.Decision{Allowed: true, Remaining: 1, Limit: 2}
	}
}

// TestLeanRapidReset: calls whose streams the peer resets while they are
// deciding count against the connection's streams until their worker
// finishes, so that resets pile up no work: past maxConcurrentStreams, a new
// stream is refused (REFUSED_STREAM), and accepted again once they finish.
func TestLeanRapidReset(t *testing.T) {
	e := &heldEngine{release: make(chan struct{})}
	released := false
	t.Cleanup(func() {
		if !released {
			close(e.release)
		}
	})
	var in bytes.Buffer
	peer := http2.NewFramer(&in, nil)
	c := testConn(t, &in, func(cfg *ServerConfig) { cfg.Engine = e })
	conf, err := Parse(Doc{Name: "d.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")})
	if err != nil {
		t.Fatal(err)
	}
	c.s.SetConfig(conf)
	msg, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	body := append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", pathShouldRateLimit}, {"content-type", "application/grpc"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: true}) // one block for every stream
	}
	open := func(id uint32) error {
		peer.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
		return c.readFrame(false)
	}
	id := uint32(1)
	for range maxConcurrentStreams {
		if err := open(id); err != nil {
			t.Fatal(err)
		}
		peer.WriteData(id, true, body)
		peer.WriteRSTStream(id, http2.ErrCodeCancel)
		for range 2 {
			if err := c.readFrame(false); err != nil {
				t.Fatal(err)
			}
		}
		id += 2
	}
	c.wmu.Lock()
	streams, orphans := len(c.streams), c.orphans
	c.wmu.Unlock()
	if streams != 0 || orphans != maxConcurrentStreams {
		t.Fatalf("%d streams and %d orphans, want 0 and %d", streams, orphans, maxConcurrentStreams)
	}
	var se http2.StreamError
	if err := open(id); !errors.As(err, &se) || se.Code != http2.ErrCodeRefusedStream {
		t.Errorf("a stream past %d reset calls still deciding: %v, want REFUSED_STREAM", maxConcurrentStreams, err)
	}
	id += 2
	close(e.release)
	released = true
	for { // the workers finish, each its own time
		c.wmu.Lock()
		orphans = c.orphans
		c.wmu.Unlock()
		if orphans == 0 {
			break
		}
		runtime.Gosched()
	}
	if err := open(id); err != nil {
		t.Errorf("a stream once the calls finished: %v", err)
	}
}

// TestLeanWriteTimeout: a writer whose peer reads nothing gives up after
// the write timeout and closes the connection, rather than stay blocked
// (a worker lost to the server).
func TestLeanWriteTimeout(t *testing.T) {
	s := NewServer(ServerConfig{Transport: TransportLean})
	a, b := net.Pipe() // unbuffered: nobody reads b, so a write to a blocks
	defer b.Close()
	c := newLeanConn(s.lean, a)
	c.writeTimeout = time.Millisecond
	c.wmu.Lock()
	c.wbuf = appendWindowUpdate(c.wbuf, 0, 1)
	c.flushLocked(false) // returns once the write gave up
	closed, writing := c.closed, c.writing
	c.wmu.Unlock()
	if !closed || writing {
		t.Errorf("after a write nobody read: closed %v, writing %v; want closed", closed, writing)
	}
}

// tempErrListener's Accept fails once with a temporary error (EMFILE, as
// when out of file descriptors), then waits until closed.
type tempErrListener struct {
	net.Listener // nil: only Accept, Close and Addr are used
	calls        int
	again        chan struct{} // closed by the second Accept
	closed       chan struct{}
}

func (l *tempErrListener) Accept() (net.Conn, error) {
	l.calls++
	if l.calls == 1 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	if l.calls == 2 {
		close(l.again)
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *tempErrListener) Close() error {
	select {
	case <-l.closed:
	default:
		close(l.closed)
	}
	return nil
}

// TestLeanAcceptRetries: a temporary Accept error (out of file
// descriptors) does not stop the server: it accepts again, and Serve
// returns nil once closed.
func TestLeanAcceptRetries(t *testing.T) {
	s := NewServer(ServerConfig{Transport: TransportLean})
	ln := &tempErrListener{again: make(chan struct{}), closed: make(chan struct{})}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	<-ln.again
	s.Close(context.Background())
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// blockedConn is a testConn with n responses of size bytes held back by a
// stream window of 0 (SETTINGS_INITIAL_WINDOW_SIZE 0), and peer, the
// framer that feeds it.
func blockedConn(t testing.TB, n, size int) (*leanConn, *http2.Framer) {
	var in bytes.Buffer
	peer := http2.NewFramer(&in, nil)
	c := testConn(t, &in)
	peer.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	if err := c.readFrame(false); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		sending(c, uint32(2*i+1), size)
	}
	c.wbuf = c.wbuf[:0]
	if len(c.flow.blocked.s) != n {
		t.Fatalf("%d responses held back, want %d", len(c.flow.blocked.s), n)
	}
	return c, peer
}

// TestLeanFlowWork: with 1000 responses held back by their stream
// windows, a WINDOW_UPDATE or SETTINGS that lets none of them send
// touches none of them (it used to try each one: 31 µs a frame), one on a
// stream touches that stream alone, and a SETTINGS_INITIAL_WINDOW_SIZE
// that opens every window pops each stream once, each sending its byte.
func TestLeanFlowWork(t *testing.T) {
	const n = 1000
	c, peer := blockedConn(t, n, 100)
	read := func() {
		t.Helper()
		if err := c.readFrame(false); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 * n {
		peer.WriteWindowUpdate(0, 1) // the connection's window: the streams' stay at 0
		read()
	}
	for range maxSettings - 2 {
		peer.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		read()
	}
	if c.flow.pops != 0 || frames(t, c) != strings.Repeat("SETTINGS ack, ", maxSettings-3)+"SETTINGS ack" {
		t.Fatalf("%d streams popped by frames that let none send", c.flow.pops)
	}
	peer.WriteWindowUpdate(7, 3)
	read()
	if got := frames(t, c); c.flow.pops != 1 || got != "DATA 7 3" {
		t.Fatalf("a WINDOW_UPDATE on stream 7: %d streams popped, frames %q", c.flow.pops, got)
	}
	c.settings = 0 // as after a request
	peer.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
	read()
	if got := frames(t, c); c.flow.pops != 1+n || strings.Count(got, "DATA") != n {
		t.Fatalf("SETTINGS_INITIAL_WINDOW_SIZE 1: %d streams popped (want %d), %d DATA frames", c.flow.pops, 1+n, strings.Count(got, "DATA"))
	}
}

// TestLeanWindowOverflow: a SETTINGS_INITIAL_WINDOW_SIZE that would take
// a stream's window past 2^31-1 is a connection error (RFC 9113 6.9.2),
// found at the top of the granted heap whichever stream it is; one that
// takes it to 2^31-1 is fine.
func TestLeanWindowOverflow(t *testing.T) {
	c, peer := blockedConn(t, 3, 1<<17)    // more than the connection's window
	peer.WriteWindowUpdate(3, maxWindow/2) // stream 3 sends the connection's window, then waits for more
	peer.WriteWindowUpdate(5, 50)
	for range 2 {
		if err := c.readFrame(false); err != nil {
			t.Fatal(err)
		}
	}
	d := c.streams[3].winDelta
	if d != maxWindow/2-defaultWindow {
		t.Fatalf("stream 3's window %d, want %d", d, maxWindow/2-defaultWindow)
	}
	peer.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(maxWindow - d + 1)})
	var ce connError
	if err := c.readFrame(false); !errors.As(err, &ce) || ce.code != http2.ErrCodeFlowControl {
		t.Fatalf("a setting that takes stream 3's window past 2^31-1: %v, want FLOW_CONTROL_ERROR", err)
	}
	peer.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(maxWindow - d)})
	if err := c.readFrame(false); err != nil {
		t.Fatalf("a setting that takes stream 3's window to 2^31-1: %v", err)
	}
}

// BenchmarkLeanFlowFrame: the server's time for a frame that lets no held
// back response send, with 1 or 1000 of them held back.
func BenchmarkLeanFlowFrame(b *testing.B) {
	for _, n := range []int{1, 1000} {
		for _, kind := range []string{"window_update", "settings"} {
			b.Run(fmt.Sprintf("%s/blocked=%d", kind, n), func(b *testing.B) {
				c, peer := blockedConn(b, n, 100)
				b.ReportAllocs()
				for b.Loop() {
					if kind == "settings" {
						c.settings = 0
						peer.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
					} else {
						peer.WriteWindowUpdate(0, 1)
					}
					if err := c.readFrame(false); err != nil {
						b.Fatal(err)
					}
					c.wbuf = c.wbuf[:0]
				}
			})
		}
	}
}
