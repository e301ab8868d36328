package rls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

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
func testConn(t *testing.T, in *bytes.Buffer) *leanConn {
	s := NewServer(ServerConfig{Transport: TransportLean})
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	c := newLeanConn(s.lean, a)
	c.fr = http2.NewFramer(io.Discard, in)
	c.writing = true
	return c
}

// frames lists the frames in c.wbuf, and empties it.
func frames(t *testing.T, c *leanConn) string {
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
	st.state, st.sendWin = streamSending, c.peerWin
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
	if len(c.streams) != 0 || len(c.blocked) != 0 {
		t.Errorf("a finished stream is left: %v %v", c.streams, c.blocked)
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
