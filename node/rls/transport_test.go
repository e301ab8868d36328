package rls_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/rls"
)

// The transport-level tests talk raw HTTP/2 (RFC 9113) to each of the
// server's transports and check what the gRPC over HTTP/2 protocol and the
// RFC require of a server, and nothing a particular server chooses on its
// own (GOAWAY debug data, error messages, frame sizes within the limits).

const (
	pathRLS    = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	pathHealth = "/grpc.health.v1.Health/Check"
	// hangGuard bounds every wait on the server, so that a server that
	// never answers fails the test instead of hanging it; no assertion
	// depends on it.
	hangGuard = 30 * time.Second
	// maxFrame is the SETTINGS_MAX_FRAME_SIZE of the raw client (the
	// protocol's initial value, which it never changes).
	maxFrame = 16384
)

// transportYAML has one limit: a descriptor k=v with hits_addend h is left
// 1000-h, so that each answer tells which request it answers.
const transportYAML = `
domain: t
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

// h2client is a raw HTTP/2 client over one TCP connection: the test writes
// frames as it scripts them, and read records what the server sends. It
// answers the server's SETTINGS and PINGs, and (unless manualFlow) gives
// back the flow-control window of each DATA frame it reads, so that a
// server is never stalled by it. It is used from one goroutine.
type h2client struct {
	t       testing.TB
	conn    net.Conn
	fr      *http2.Framer
	henc    *hpack.Encoder
	hbuf    bytes.Buffer
	streams map[uint32]*h2stream
	log     []frameRec // every frame read, in order

	serverSettings bool // the server's first SETTINGS has been read
	settingsAcks   int  // SETTINGS ACKs read
	pingAcks       [][8]byte
	goaways        []goaway
	maxStreams     uint32 // the server's SETTINGS_MAX_CONCURRENT_STREAMS
	peerInitWin    int64  // the server's SETTINGS_INITIAL_WINDOW_SIZE
	peerMaxFrame   uint32 // the server's SETTINGS_MAX_FRAME_SIZE
	sendConnWin    int64  // the connection window the server gives
	manualFlow     bool   // the test sends WINDOW_UPDATEs itself
	mute           bool   // write errors are ignored
}

type frameRec struct {
	typ    http2.FrameType
	stream uint32
	length uint32
}

type goaway struct {
	lastStreamID uint32
	code         http2.ErrCode
}

// h2stream is what the server sent on a stream.
type h2stream struct {
	blocks     [][]hpack.HeaderField // header blocks: headers, then trailers
	data       []byte
	dataFrames int
	ended      bool // END_STREAM read
	rst        bool
	rstCode    http2.ErrCode
	sendWin    int64 // the stream window the server gives
}

// dialH2 connects to addr, writes the client preface and a SETTINGS frame
// of settings, and reads until the server's SETTINGS.
func dialH2(t testing.TB, addr string, settings ...http2.Setting) *h2client {
	t.Helper()
	c := dialRaw(t, addr)
	if _, err := io.WriteString(c.conn, http2.ClientPreface); err != nil {
		t.Fatalf("preface: %v", err)
	}
	c.check(c.fr.WriteSettings(settings...))
	c.readUntil("the server's SETTINGS", func() bool { return c.serverSettings })
	return c
}

// dialRaw connects to addr and writes nothing.
func dialRaw(t testing.TB, addr string) *h2client {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return newH2Client(t, conn)
}

// newH2Client is an h2client on conn, which it closes at the test's end.
func newH2Client(t testing.TB, conn net.Conn) *h2client {
	t.Helper()
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(hangGuard)) // a hang guard only
	c := &h2client{t: t, conn: conn, streams: map[uint32]*h2stream{},
		maxStreams: 1 << 31, peerInitWin: 65535, peerMaxFrame: maxFrame, sendConnWin: 65535}
	c.fr = http2.NewFramer(conn, bufio.NewReader(conn))
	c.fr.AllowIllegalWrites = true // the protocol violations are written on purpose
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 1 << 20
	c.fr.SetMaxReadFrameSize(maxFrame) // a bigger frame is an error of the server
	c.henc = hpack.NewEncoder(&c.hbuf)
	return c
}

func (c *h2client) check(err error) {
	c.t.Helper()
	if err != nil && !c.mute {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *h2client) stream(id uint32) *h2stream {
	s := c.streams[id]
	if s == nil {
		s = &h2stream{sendWin: c.peerInitWin}
		c.streams[id] = s
	}
	return s
}

// read reads one frame and records it.
func (c *h2client) read() (http2.Frame, error) {
	f, err := c.fr.ReadFrame()
	if err != nil {
		return nil, err
	}
	h := f.Header()
	c.log = append(c.log, frameRec{h.Type, h.StreamID, h.Length})
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			c.settingsAcks++
			break
		}
		c.serverSettings = true
		f.ForeachSetting(func(s http2.Setting) error {
			switch s.ID {
			case http2.SettingMaxConcurrentStreams:
				c.maxStreams = s.Val
			case http2.SettingInitialWindowSize:
				for _, st := range c.streams {
					st.sendWin += int64(s.Val) - c.peerInitWin
				}
				c.peerInitWin = int64(s.Val)
			case http2.SettingMaxFrameSize:
				c.peerMaxFrame = s.Val
			}
			return nil
		})
		c.check(c.fr.WriteSettingsAck())
	case *http2.PingFrame:
		if f.IsAck() {
			c.pingAcks = append(c.pingAcks, f.Data)
		} else {
			c.check(c.fr.WritePing(true, f.Data))
		}
	case *http2.GoAwayFrame:
		c.goaways = append(c.goaways, goaway{f.LastStreamID, f.ErrCode})
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			c.sendConnWin += int64(f.Increment)
		} else {
			c.stream(f.StreamID).sendWin += int64(f.Increment)
		}
	case *http2.MetaHeadersFrame:
		s := c.stream(f.StreamID)
		s.blocks = append(s.blocks, append([]hpack.HeaderField(nil), f.Fields...))
		s.ended = s.ended || f.StreamEnded()
	case *http2.DataFrame:
		s := c.stream(f.StreamID)
		s.data = append(s.data, f.Data()...)
		s.dataFrames++
		s.ended = s.ended || f.StreamEnded()
		if n := f.Length; n > 0 && !c.manualFlow {
			c.check(c.fr.WriteWindowUpdate(0, n))
			if !f.StreamEnded() {
				c.check(c.fr.WriteWindowUpdate(f.StreamID, n))
			}
		}
	case *http2.RSTStreamFrame:
		s := c.stream(f.StreamID)
		s.rst, s.rstCode = true, f.ErrCode
	}
	return f, nil
}

// readUntil reads until cond holds; the connection ending first fails the
// test.
func (c *h2client) readUntil(what string, cond func() bool) {
	c.t.Helper()
	for !cond() {
		if _, err := c.read(); err != nil {
			c.t.Fatalf("reading until %s: %v", what, err)
		}
	}
}

// readStreams reads until done holds for each of streams 1, 3, ...,
// 2n-1.
func (c *h2client) readStreams(what string, n int, done func(*h2stream) bool) {
	c.t.Helper()
	c.readUntil(what, func() bool {
		for i := range n {
			if !done(c.stream(uint32(2*i + 1))) {
				return false
			}
		}
		return true
	})
}

// answered is a readStreams condition: the stream has ended or been
// reset.
func answered(s *h2stream) bool { return s.ended || s.rst }

// readToEnd reads until the server closes the connection (a read error
// that is not the hang guard's deadline). What read writes meanwhile may
// fail: the server is closing.
func (c *h2client) readToEnd() {
	c.t.Helper()
	c.mute = true
	for {
		_, err := c.read()
		if err == nil {
			continue
		}
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatalf("the server did not close the connection: %v", err)
		}
		return
	}
}

// ping writes a PING and reads until its ACK: every frame the server
// sent before it read the PING has been read then.
func (c *h2client) ping(data [8]byte) {
	c.t.Helper()
	n := len(c.pingAcks)
	c.check(c.fr.WritePing(false, data))
	c.readUntil("the PING ACK", func() bool {
		for _, d := range c.pingAcks[n:] {
			if d == data {
				return true
			}
		}
		return false
	})
}

// sendFlow sends data on stream id (whose HEADERS are sent) in DATA
// frames, the last with END_STREAM, as the server's flow-control windows
// and SETTINGS_MAX_FRAME_SIZE allow, reading frames while they are
// closed; it stops early if the server ends or resets the stream.
func (c *h2client) sendFlow(id uint32, data []byte) {
	c.t.Helper()
	c.sendData(id, data, true)
}

// sendData is sendFlow, with END_STREAM on the last frame if end. A muted
// client stops when the connection ends, and reports it (false).
func (c *h2client) sendData(id uint32, data []byte, end bool) bool {
	c.t.Helper()
	s := c.stream(id)
	for len(data) > 0 && !s.ended && !s.rst {
		n := min(int64(len(data)), c.sendConnWin, s.sendWin, int64(c.peerMaxFrame))
		if n <= 0 {
			if _, err := c.read(); err != nil {
				if c.mute {
					return false
				}
				c.t.Fatalf("reading while the windows are closed: %v", err)
			}
			continue
		}
		c.check(c.fr.WriteData(id, end && int(n) == len(data), data[:n]))
		data = data[n:]
		c.sendConnWin -= n
		s.sendWin -= n
	}
	return true
}

// headerBlock encodes a gRPC request's headers for path, with extra in
// place of those of their names, or after.
func (c *h2client) headerBlock(path string, extra ...hpack.HeaderField) []byte {
	c.hbuf.Reset()
	fs := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: path},
		{Name: ":authority", Value: "rls.test"},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
	}
next:
	for _, e := range extra {
		for i := range fs {
			if fs[i].Name == e.Name {
				fs[i] = e
				continue next
			}
		}
		fs = append(fs, e)
	}
	for _, f := range fs {
		c.henc.WriteField(f)
	}
	return bytes.Clone(c.hbuf.Bytes())
}

// shape is how a request is cut into frames.
type shape struct {
	headerFrags int   // the header block in this many fragments: HEADERS then CONTINUATIONs
	pad         uint8 // padding of each HEADERS and DATA frame
	dataFrames  int   // the message in this many DATA frames
	interleave  bool  // a PRIORITY and a frame of an unknown type between the request's frames
	open        bool  // no END_STREAM: the request is left unfinished
	extra       []hpack.HeaderField
}

// send writes a request on stream id: the headers for path, then msg (a
// length-prefixed gRPC message, see grpcMsg) cut as sh says.
func (c *h2client) send(id uint32, path string, msg []byte, sh shape) {
	c.t.Helper()
	c.stream(id)
	between := func() {
		if !sh.interleave {
			return
		}
		// PRIORITY on the request's own stream and on another (idle)
		// one, and an unknown type (0xb0): both are allowed anywhere
		// but inside a header block.
		c.check(c.fr.WritePriority(id, http2.PriorityParam{StreamDep: 0, Weight: 7}))
		c.check(c.fr.WriteRawFrame(0xb0, 0x5, id, []byte("unknown frame type")))
		c.check(c.fr.WriteRawFrame(0xb0, 0, 0, nil))
	}
	block := c.headerBlock(path, sh.extra...)
	frags := max(sh.headerFrags, 1)
	size := (len(block) + frags - 1) / frags
	var pad []byte
	if sh.pad > 0 {
		pad = make([]byte, sh.pad)
	}
	between()
	for i := 0; i < frags; i++ {
		part := block[min(i*size, len(block)):min((i+1)*size, len(block))]
		last := i == frags-1
		if i == 0 {
			c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: part,
				EndStream: len(msg) == 0 && !sh.open, EndHeaders: last, PadLength: sh.pad}))
		} else {
			c.check(c.fr.WriteContinuation(id, last, part))
		}
	}
	between()
	n := max(sh.dataFrames, 1)
	step := (len(msg) + n - 1) / n
	for i := 0; i < n && len(msg) > 0; i++ {
		part := msg[min(i*step, len(msg)):min((i+1)*step, len(msg))]
		end := (i+1)*step >= len(msg) && !sh.open
		c.check(c.fr.WriteDataPadded(id, end, part, pad))
		if end {
			break
		}
		between()
	}
}

// grpcMsg is m length-prefixed as a gRPC message (uncompressed).
func grpcMsg(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b))), b...)
}

// rlsReq is a request of one descriptor k=key with hits_addend hits.
func rlsReq(key string, hits int) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "t", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k="+key, "+"+strconv.Itoa(hits))}}
}

func field(fs []hpack.HeaderField, name string) (string, bool) {
	for _, f := range fs {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// grpcStatus is the grpc-status of a finished stream: in its trailers, or
// in its only header block (a Trailers-Only response).
func (s *h2stream) grpcStatus() string {
	if len(s.blocks) == 0 {
		return "(no headers)"
	}
	v, ok := field(s.blocks[len(s.blocks)-1], "grpc-status")
	if !ok {
		return "(no grpc-status)"
	}
	return v
}

// checkOK checks a finished stream's response as the gRPC protocol says:
// :status 200, a gRPC content-type, one length-prefixed message in its
// DATA, trailers with grpc-status 0; it decodes the message into m.
func checkOK(t testing.TB, s *h2stream, m proto.Message) {
	t.Helper()
	if !s.ended || s.rst {
		t.Fatalf("stream not finished (ended %v, reset %v %v)", s.ended, s.rst, s.rstCode)
	}
	if len(s.blocks) != 2 {
		t.Fatalf("%d header blocks, want headers and trailers: %v", len(s.blocks), s.blocks)
	}
	h := s.blocks[0]
	if v, _ := field(h, ":status"); v != "200" {
		t.Errorf(":status %q, want 200 (%v)", v, h)
	}
	if v, _ := field(h, "content-type"); v != "application/grpc" && !strings.HasPrefix(v, "application/grpc+") && !strings.HasPrefix(v, "application/grpc;") {
		t.Errorf("content-type %q, want application/grpc", v)
	}
	if v := s.grpcStatus(); v != "0" {
		t.Fatalf("grpc-status %s, want 0 (trailers %v)", v, s.blocks[1])
	}
	unmarshalMsg(t, s.data, m)
}

func unmarshalMsg(t testing.TB, data []byte, m proto.Message) {
	t.Helper()
	if len(data) < 5 || data[0] != 0 || int(binary.BigEndian.Uint32(data[1:5])) != len(data)-5 {
		t.Fatalf("not one uncompressed length-prefixed message: % x", data[:min(len(data), 16)])
	}
	if err := proto.Unmarshal(data[5:], m); err != nil {
		t.Fatalf("the message does not decode: %v", err)
	}
}

// checkRLS checks the answer to rlsReq(_, hits) on transportYAML.
func checkRLS(t testing.TB, s *h2stream, hits int) {
	t.Helper()
	var resp rlsv3.RateLimitResponse
	checkOK(t, s, &resp)
	if got := codesOf(&resp); got != "OK: OK" {
		t.Fatalf("codes %s", got)
	}
	if st := resp.Statuses[0]; st.LimitRemaining != uint32(1000-hits) || st.CurrentLimit.GetRequestsPerUnit() != 1000 {
		t.Errorf("status %v, want 1000-%d remaining of 1000", st, hits)
	}
}

// call makes one ShouldRateLimit call on a new stream of c and checks it.
func (c *h2client) call(id uint32, key string, hits int) {
	c.t.Helper()
	c.send(id, pathRLS, grpcMsg(c.t, rlsReq(key, hits)), shape{})
	c.readUntil("the answer", func() bool { return c.stream(id).ended || c.stream(id).rst })
	checkRLS(c.t, c.stream(id), hits)
}

// TestTransportUnary: a ShouldRateLimit call however its frames are cut
// (header block in HEADERS and CONTINUATIONs, padding, the message over
// several DATA frames, PRIORITY and unknown frames in between) gets its
// answer, each on its own connection and all of them on one.
func TestTransportUnary(t *testing.T) {
	shapes := []struct {
		name string
		sh   shape
	}{
		{"plain", shape{}},
		{"continuation", shape{headerFrags: 4}},
		{"padded", shape{pad: 17}},
		{"padded max", shape{pad: 255, headerFrags: 2}},
		{"split message", shape{dataFrames: 7}},
		{"byte by byte", shape{dataFrames: 1 << 10}},
		{"interleaved", shape{headerFrags: 3, dataFrames: 3, interleave: true}},
		{"all", shape{headerFrags: 3, pad: 3, dataFrames: 5, interleave: true}},
	}
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, transportYAML, withTransport(tr))
		shared := dialH2(t, r.addr)
		for i, tc := range shapes {
			t.Run(tc.name, func(t *testing.T) {
				c := dialH2(t, r.addr)
				c.send(1, pathRLS, grpcMsg(t, rlsReq("own"+strconv.Itoa(i), i+1)), tc.sh)
				c.readUntil("the answer", func() bool { return c.stream(1).ended || c.stream(1).rst })
				checkRLS(t, c.stream(1), i+1)

				// The same on a connection that carried the shapes before
				// (its HPACK tables in use).
				id := uint32(2*i + 1)
				shared.t = t
				shared.send(id, pathRLS, grpcMsg(t, rlsReq("shared"+strconv.Itoa(i), i+1)), tc.sh)
				shared.readUntil("the answer", func() bool { return shared.stream(id).ended || shared.stream(id).rst })
				checkRLS(t, shared.stream(id), i+1)
			})
		}
	})
}

// TestTransportConcurrentStreams: many streams open at once on one
// connection each get their own answer.
func TestTransportConcurrentStreams(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, transportYAML, withTransport(tr))
		c := dialH2(t, r.addr)
		n := int(min(c.maxStreams, 100))
		// The HEADERS of all, then the DATA of all in reverse order, so
		// that every stream is open at once.
		msgs := make([][]byte, n)
		for i := range n {
			id := uint32(2*i + 1)
			msgs[i] = grpcMsg(t, rlsReq("c"+strconv.Itoa(i), i+1))
			c.stream(id)
			c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.headerBlock(pathRLS), EndHeaders: true}))
		}
		for i := n - 1; i >= 0; i-- {
			c.check(c.fr.WriteData(uint32(2*i+1), true, msgs[i]))
		}
		c.readStreams("every answer", n, answered)
		for i := range n {
			checkRLS(t, c.stream(uint32(2*i+1)), i+1)
		}
	})
}

// bigYAML's limit has a long name, which each status repeats: 64
// descriptors make an answer of more than one maximal frame.
var bigYAML = `
domain: t
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1000, name: ` + strings.Repeat("n", 400) + `}
`

func bigReq(prefix string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "t"}
	for i := range rls.MaxDescriptors {
		req.Descriptors = append(req.Descriptors, desc("k="+prefix+strconv.Itoa(i)))
	}
	return req
}

func checkBig(t testing.TB, s *h2stream) {
	t.Helper()
	var resp rlsv3.RateLimitResponse
	checkOK(t, s, &resp)
	if len(resp.Statuses) != rls.MaxDescriptors || len(resp.ResponseHeadersToAdd) == 0 {
		t.Fatalf("%d statuses, %d headers", len(resp.Statuses), len(resp.ResponseHeadersToAdd))
	}
	for _, st := range resp.Statuses {
		if st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 999 {
			t.Fatalf("status %v", st)
		}
	}
}

// TestTransportFlowControl: with a tiny stream window (10 bytes) the
// server never sends more DATA than the windows allow, the stream's and
// the connection's (which starts at 65535: a client cannot set it lower,
// so the answers here are made to use it up); it finishes as the client
// gives window back. An answer bigger than SETTINGS_MAX_FRAME_SIZE is cut
// into frames of at most that size.
func TestTransportFlowControl(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, bigYAML, withTransport(tr), func(c *rls.ServerConfig) { c.ResponseHeaders = true })
		const initWin = 10
		c := dialH2(t, r.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: initWin})
		c.manualFlow = true
		// The server may send before it reads the SETTINGS: only after
		// their ACK is the window known to be 10. No DATA can come
		// before a request anyway.
		c.readUntil("the SETTINGS ACK", func() bool { return c.settingsAcks > 0 })

		const n = 4 // answers of 25 KiB or so each: more than the connection window
		connWin := int64(65535)
		win := map[uint32]int64{}
		frames := map[uint32]int{}
		for i := range n {
			id := uint32(2*i + 1)
			win[id] = initWin
			c.send(id, pathRLS, grpcMsg(t, bigReq(strconv.Itoa(i)+"-")), shape{})
		}
		var connGiven int64
		seen := len(c.log)
		c.readUntil("every answer", func() bool {
			for ; seen < len(c.log); seen++ {
				if f := c.log[seen]; f.typ == http2.FrameData {
					id, l := f.stream, int64(f.length)
					if l > win[id] || l > connWin {
						t.Fatalf("DATA of %d bytes on stream %d with windows of %d (stream) and %d (connection)", l, id, win[id], connWin)
					}
					if l > maxFrame {
						t.Fatalf("DATA of %d bytes, past SETTINGS_MAX_FRAME_SIZE", l)
					}
					win[id] -= l
					connWin -= l
					frames[id]++
					s := c.stream(id)
					// The stream's window: 10 bytes at a time for its first
					// frames, then 4 KiB.
					if win[id] == 0 && !s.ended {
						inc := int64(initWin)
						if frames[id] > 20 {
							inc = 4096
						}
						c.check(c.fr.WriteWindowUpdate(id, uint32(inc)))
						win[id] += inc
					}
					// The connection's: given back only once used up,
					// a little at a time.
					if connWin < initWin {
						c.check(c.fr.WriteWindowUpdate(0, 1000))
						connWin += 1000
						connGiven += 1000
					}
				}
			}
			for i := range n {
				if s := c.stream(uint32(2*i + 1)); !s.ended && !s.rst {
					return false
				}
			}
			return true
		})
		if connGiven == 0 {
			t.Fatal("the answers did not use the connection's window up: the test tests less than it says")
		}
		for i := range n {
			s := c.stream(uint32(2*i + 1))
			if len(s.data) <= maxFrame {
				t.Fatalf("an answer of %d bytes: no bigger than a frame", len(s.data))
			}
			checkBig(t, s)
		}

		// With the windows open, an answer bigger than a frame is cut.
		c2 := dialH2(t, r.addr)
		c2.send(1, pathRLS, grpcMsg(t, bigReq("x")), shape{})
		c2.readUntil("the answer", func() bool { return c2.stream(1).ended || c2.stream(1).rst })
		checkBig(t, c2.stream(1))
		if c2.stream(1).dataFrames < 2 {
			t.Errorf("%d bytes in %d DATA frame", len(c2.stream(1).data), c2.stream(1).dataFrames)
		}
		for _, f := range c2.log {
			if f.typ == http2.FrameData && f.length > maxFrame {
				t.Errorf("DATA frame of %d bytes", f.length)
			}
		}
	})
}

// TestTransportWindowShrink: a SETTINGS_INITIAL_WINDOW_SIZE lowered while
// a stream's window is used up makes that window negative (RFC 9113
// 6.9.2): the server sends nothing more on the stream until WINDOW_UPDATEs
// bring it above zero, and then no more than they allow.
func TestTransportWindowShrink(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, bigYAML, withTransport(tr), func(c *rls.ServerConfig) { c.ResponseHeaders = true })
		c := dialH2(t, r.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
		c.manualFlow = true
		c.readUntil("the SETTINGS ACK", func() bool { return c.settingsAcks == 1 })
		c.check(c.fr.WriteWindowUpdate(0, 1<<24)) // the connection's window is not under test
		win := int64(10)
		seen := len(c.log)
		checkData := func() {
			for ; seen < len(c.log); seen++ {
				if f := c.log[seen]; f.typ == http2.FrameData && f.stream == 1 {
					if int64(f.length) > win {
						t.Fatalf("DATA of %d bytes with a stream window of %d", f.length, win)
					}
					win -= int64(f.length)
				}
			}
		}
		c.send(1, pathRLS, grpcMsg(t, bigReq("s")), shape{})
		c.readUntil("the window used up", func() bool { checkData(); return win == 0 })
		c.check(c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 4}))
		win -= 6
		c.readUntil("the SETTINGS ACK", func() bool { checkData(); return c.settingsAcks == 2 })
		c.check(c.fr.WriteWindowUpdate(1, 5)) // -1: still nothing to send
		win += 5
		c.ping([8]byte{1})
		checkData()
		c.check(c.fr.WriteWindowUpdate(1, 3)) // 2
		win += 3
		c.readUntil("the window used up", func() bool { checkData(); return win == 0 })
		c.check(c.fr.WriteWindowUpdate(1, 1<<24))
		win += 1 << 24
		c.readUntil("the answer", func() bool { checkData(); return c.stream(1).ended || c.stream(1).rst })
		checkData()
		checkBig(t, c.stream(1))
	})
}

// TestTransportPingSettings: a PING is answered by a PING ACK with the same
// data; a SETTINGS by a SETTINGS ACK.
func TestTransportPingSettings(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, transportYAML, withTransport(tr))
		c := dialH2(t, r.addr)
		c.readUntil("the SETTINGS ACK", func() bool { return c.settingsAcks == 1 })
		c.ping([8]byte{1, 2, 3, 4, 5, 6, 7, 8})
		c.ping([8]byte{0xff, 0, 0xfe, 1, 0xfd, 2, 0xfc, 3})
		c.check(c.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: maxFrame},
			http2.Setting{ID: http2.SettingHeaderTableSize, Val: 100}))
		c.check(c.fr.WriteSettings())
		c.readUntil("two more SETTINGS ACKs", func() bool { return c.settingsAcks == 3 })
		c.call(1, "a", 1)

		// A client with no HPACK dynamic table: once its SETTINGS are
		// acknowledged, the server's header blocks must decode without
		// one (RFC 7541 4.2).
		z := dialH2(t, r.addr, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
		z.fr.ReadMetaHeaders = hpack.NewDecoder(0, nil)
		z.readUntil("the SETTINGS ACK", func() bool { return z.settingsAcks == 1 })
		for i := range 3 {
			z.call(uint32(2*i+1), "z"+strconv.Itoa(i), 1)
		}
	})
}

// TestTransportMethods: the paths the server does not serve are
// UNIMPLEMENTED; the health service's Check says SERVING with a
// configuration, NOT_SERVING without, NOT_FOUND for an unknown service.
func TestTransportMethods(t *testing.T) {
	check := func(t *testing.T, c *h2client, id uint32, service string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		c.send(id, pathHealth, grpcMsg(t, &healthpb.HealthCheckRequest{Service: service}), shape{})
		c.readUntil("the answer", func() bool { return c.stream(id).ended || c.stream(id).rst })
		var resp healthpb.HealthCheckResponse
		checkOK(t, c.stream(id), &resp)
		if resp.Status != want {
			t.Errorf("Check(%q) = %v, want %v", service, resp.Status, want)
		}
	}
	status := func(t *testing.T, c *h2client, id uint32, path string, msg []byte, want string) {
		t.Helper()
		c.send(id, path, msg, shape{})
		c.readUntil("the answer", func() bool { return c.stream(id).ended || c.stream(id).rst })
		if got := c.stream(id).grpcStatus(); got != want {
			t.Errorf("%s: grpc-status %s, want %s", path, got, want)
		}
	}
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, transportYAML, withTransport(tr))
		c := dialH2(t, r.addr)
		check(t, c, 1, "", healthpb.HealthCheckResponse_SERVING)
		check(t, c, 3, "envoy.service.ratelimit.v3.RateLimitService", healthpb.HealthCheckResponse_SERVING)
		status(t, c, 5, pathHealth, grpcMsg(t, &healthpb.HealthCheckRequest{Service: "no.such.Service"}), "5")
		status(t, c, 7, "/envoy.service.ratelimit.v3.RateLimitService/NoSuchMethod", grpcMsg(t, rlsReq("a", 1)), "12")
		status(t, c, 9, "/no.such.Service/Method", grpcMsg(t, rlsReq("a", 1)), "12")
		c.call(11, "a", 1)

		none := newRig(t, "", withTransport(tr))
		c = dialH2(t, none.addr)
		check(t, c, 1, "", healthpb.HealthCheckResponse_NOT_SERVING)
		check(t, c, 3, "envoy.service.ratelimit.v3.RateLimitService", healthpb.HealthCheckResponse_NOT_SERVING)
		status(t, c, 5, pathRLS, grpcMsg(t, rlsReq("a", 1)), "14") // UNAVAILABLE
	})
}

// TestTransportBadMessages: a message flagged compressed when no
// compression was declared is refused with a non-OK grpc-status; one past
// the server's limit (256 KiB) with RESOURCE_EXHAUSTED; a message cut
// short by END_STREAM, or two messages for a unary call, with a non-OK
// status. The connection keeps serving.
func TestTransportBadMessages(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, transportYAML, withTransport(tr))
		c := dialH2(t, r.addr)
		answered := func(id uint32) func() bool {
			return func() bool { return c.stream(id).ended || c.stream(id).rst }
		}
		notOK := func(id uint32, what string) {
			t.Helper()
			s := c.stream(id)
			if !s.rst && (s.grpcStatus() == "0" || strings.HasPrefix(s.grpcStatus(), "(")) {
				t.Errorf("%s: grpc-status %s, want an error", what, s.grpcStatus())
			}
		}

		msg := grpcMsg(t, rlsReq("a", 1))
		msg[0] = 1 // compressed, and no grpc-encoding
		c.send(1, pathRLS, msg, shape{})
		c.readUntil("the answer", answered(1))
		notOK(1, "compressed flag without grpc-encoding")

		msg = grpcMsg(t, rlsReq("a", 1))
		c.send(3, pathRLS, msg[:len(msg)-3], shape{})
		c.readUntil("the answer", answered(3))
		notOK(3, "a message cut short")

		two := append(grpcMsg(t, rlsReq("a", 1)), grpcMsg(t, rlsReq("b", 1))...)
		c.send(5, pathRLS, two, shape{})
		c.readUntil("the answer", answered(5))
		notOK(5, "two messages in a unary call")

		// Past the limit: the server may answer as soon as it reads the
		// length, or after the whole message.
		const size = 256<<10 + 1
		big := binary.BigEndian.AppendUint32([]byte{0}, size)
		big = append(big, make([]byte, size)...)
		id := uint32(7)
		s := c.stream(id)
		c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.headerBlock(pathRLS), EndHeaders: true}))
		c.sendFlow(id, big)
		c.readUntil("the answer", answered(id))
		if s.grpcStatus() != "8" {
			t.Errorf("a message of %d bytes: grpc-status %s, want 8 (RESOURCE_EXHAUSTED)", size, s.grpcStatus())
		}

		// No message at all; not a gRPC content-type.
		c.send(9, pathRLS, nil, shape{})
		c.readUntil("the answer", answered(9))
		notOK(9, "no message")
		c.send(11, pathRLS, grpcMsg(t, rlsReq("a", 1)), shape{extra: []hpack.HeaderField{{Name: "content-type", Value: "text/plain"}}})
		c.readUntil("the answer", answered(11))
		if s := c.stream(11); !s.rst && len(s.blocks) > 0 {
			if st, _ := field(s.blocks[0], ":status"); st == "200" && s.grpcStatus() == "0" {
				t.Errorf("a request of content-type text/plain answered as a gRPC call")
			}
		}

		c.call(13, "after", 1)
	})
}

// TestTransportBigRequest: a request bigger than the initial windows
// (about 190 KiB, under the server's limit) is let in by the server's
// WINDOW_UPDATEs and answered.
func TestTransportBigRequest(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, transportYAML, withTransport(tr))
		c := dialH2(t, r.addr)
		req := &rlsv3.RateLimitRequest{Domain: "t"}
		for i := range rls.MaxDescriptors {
			req.Descriptors = append(req.Descriptors, desc("k="+strconv.Itoa(i)+strings.Repeat("v", 3000)))
		}
		msg := grpcMsg(t, req)
		if len(msg) < 2*65535 {
			t.Fatalf("a request of %d bytes", len(msg))
		}
		c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.headerBlock(pathRLS), EndHeaders: true}))
		c.sendFlow(1, msg)
		c.readUntil("the answer", func() bool { return c.stream(1).ended || c.stream(1).rst })
		var resp rlsv3.RateLimitResponse
		checkOK(t, c.stream(1), &resp)
		if len(resp.Statuses) != rls.MaxDescriptors || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Errorf("%d statuses, overall %v", len(resp.Statuses), resp.OverallCode)
		}
		c.call(3, "after", 1)
	})
}

// TestTransportStreamLimit: a stream that takes the server past the
// SETTINGS_MAX_CONCURRENT_STREAMS it advertised is refused, not served:
// RST_STREAM of PROTOCOL_ERROR or REFUSED_STREAM (RFC 9113 5.1.2; with
// REFUSED_STREAM a client knows the request was not processed, 8.7), or
// the connection ended by a GOAWAY of such a code. The streams within the
// limit are served. (They are held open by requests left unfinished, which
// the server's budget of such requests would cut short on TransportGRPC,
// where each counts as a whole message: the test sets no budget.)
func TestTransportStreamLimit(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, transportYAML, withTransport(tr), func(c *rls.ServerConfig) { c.MaxPendingBytes = -1 })
		c := dialH2(t, r.addr)
		limit := c.maxStreams
		if limit > 1<<12 {
			t.Skipf("the server advertises no limit of streams, or a high one (%d)", limit)
		}
		for i := range limit {
			c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2*i + 1, BlockFragment: c.headerBlock(pathRLS), EndHeaders: true}))
		}
		over := 2*limit + 1
		c.send(over, pathRLS, grpcMsg(t, rlsReq("over", 1)), shape{})
		refused := func(code http2.ErrCode) bool {
			return code == http2.ErrCodeProtocol || code == http2.ErrCodeRefusedStream
		}
		c.readUntil("the stream past the limit refused", func() bool {
			return c.stream(over).ended || c.stream(over).rst || len(c.goaways) > 0
		})
		if len(c.goaways) > 0 {
			if g := c.goaways[0]; !refused(g.code) {
				t.Fatalf("GOAWAY %v, want PROTOCOL_ERROR or REFUSED_STREAM", g.code)
			}
			return
		}
		if s := c.stream(over); !s.rst || !refused(s.rstCode) {
			t.Fatalf("stream %d past the limit of %d: reset %v (%v), grpc-status %s; want RST_STREAM PROTOCOL_ERROR or REFUSED_STREAM",
				over, limit, s.rst, s.rstCode, s.grpcStatus())
		}
		for i := range limit {
			c.check(c.fr.WriteData(2*i+1, true, grpcMsg(t, rlsReq("in", 1))))
		}
		c.readUntil("the answers within the limit", func() bool {
			for i := range limit {
				if s := c.stream(2*i + 1); !s.ended && !s.rst {
					return false
				}
			}
			return true
		})
		for i := range limit {
			if s := c.stream(2*i + 1); s.grpcStatus() != "0" {
				t.Fatalf("stream %d within the limit: grpc-status %s", 2*i+1, s.grpcStatus())
			}
		}
	})
}

// TestTransportWindowOverflow: a WINDOW_UPDATE that takes a stream's
// window past 2^31-1 ends the stream with FLOW_CONTROL_ERROR (RFC 9113
// 6.9.1; or the connection, with a GOAWAY of that code).
func TestTransportWindowOverflow(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		if tr == rls.TransportGRPC {
			t.Skip("grpc-go ignores a stream window past 2^31-1")
		}
		r := newRig(t, transportYAML, withTransport(tr))
		c := dialH2(t, r.addr)
		// The request is not finished: the stream stays open.
		c.send(1, pathRLS, grpcMsg(t, rlsReq("a", 1))[:3], shape{open: true})
		c.check(c.fr.WriteWindowUpdate(1, 1<<31-1))
		c.check(c.fr.WriteWindowUpdate(1, 1<<31-1))
		c.readUntil("the stream ended", func() bool { return c.stream(1).rst || c.stream(1).ended || len(c.goaways) > 0 })
		if len(c.goaways) > 0 {
			if c.goaways[0].code != http2.ErrCodeFlowControl {
				t.Errorf("GOAWAY %v, want FLOW_CONTROL_ERROR", c.goaways[0].code)
			}
			return
		}
		if s := c.stream(1); !s.rst || s.rstCode != http2.ErrCodeFlowControl {
			t.Errorf("stream reset %v (%v), grpc-status %s; want RST_STREAM FLOW_CONTROL_ERROR", s.rst, s.rstCode, s.grpcStatus())
		}
		c.call(3, "after", 1)
	})
}

// TestTransportContentLength: a request whose content-length is not the
// length of its DATA is malformed (RFC 9113 8.1.1): it is not served; the
// stream is reset with PROTOCOL_ERROR, or answered with an error first.
func TestTransportContentLength(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		if tr == rls.TransportGRPC {
			t.Skip("grpc-go does not check content-length against the DATA")
		}
		r := newRig(t, transportYAML, withTransport(tr))
		c := dialH2(t, r.addr)
		for i, n := range []int{3, 1000} {
			id := uint32(2*i + 1)
			c.send(id, pathRLS, grpcMsg(t, rlsReq("a", 1)), shape{dataFrames: 2,
				extra: []hpack.HeaderField{{Name: "content-length", Value: strconv.Itoa(n)}}})
			c.readUntil("the stream ended", func() bool { return c.stream(id).rst || c.stream(id).ended || len(c.goaways) > 0 })
			s := c.stream(id)
			if len(c.goaways) > 0 || (s.rst && s.rstCode == http2.ErrCodeProtocol) {
				continue
			}
			if st, _ := field(append(s.blocks, nil)[0], ":status"); st == "200" && s.grpcStatus() == "0" {
				t.Errorf("content-length %d: served", n)
			}
		}
	})
}

// violation runs bad on a new connection after the preface and SETTINGS:
// the server must close that connection (RFC 9113 5.4.1: it SHOULD send a
// GOAWAY first, which grpc-go mostly does not; one sent must carry an
// error code), and another connection, open before and after, keeps being
// served.
func violation(t *testing.T, tr rls.Transport, bad func(c *h2client)) {
	r := newRig(t, transportYAML, withTransport(tr))
	other := dialH2(t, r.addr)
	other.call(1, "before", 1)
	c := dialH2(t, r.addr)
	c.readUntil("the SETTINGS ACK", func() bool { return c.settingsAcks > 0 })
	bad(c)
	c.readToEnd()
	for _, g := range c.goaways {
		if g.code == http2.ErrCodeNo {
			t.Errorf("GOAWAY with NO_ERROR after a protocol violation")
		}
	}
	other.call(3, "after", 2)
	dialH2(t, r.addr).call(1, "new", 3)
}

// TestTransportViolations: protocol violations are connection errors.
func TestTransportViolations(t *testing.T) {
	cases := []struct {
		name string
		bad  func(c *h2client)
	}{
		{"even stream id", func(c *h2client) { // 5.1.1
			c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2, BlockFragment: c.headerBlock(pathRLS), EndHeaders: true}))
		}},
		{"decreasing stream id", func(c *h2client) { // 5.1.1
			c.call(5, "five", 1)
			c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: c.headerBlock(pathRLS), EndHeaders: true}))
		}},
		{"DATA on stream 0", func(c *h2client) { // 6.1
			c.check(c.fr.WriteData(0, false, []byte("data")))
		}},
		{"invalid HPACK", func(c *h2client) { // 4.3: COMPRESSION_ERROR
			// An indexed field of index 0x7f+0x7f: past both tables.
			c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0x7f}, EndHeaders: true}))
		}},
		{"CONTINUATION without HEADERS", func(c *h2client) { // 6.10
			c.check(c.fr.WriteContinuation(1, true, c.headerBlock(pathRLS)))
		}},
		{"frame inside a header block", func(c *h2client) { // 6.10
			c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.headerBlock(pathRLS)[:3]}))
			c.check(c.fr.WritePing(false, [8]byte{}))
		}},
		{"SETTINGS on a stream", func(c *h2client) { // 6.5
			c.check(c.fr.WriteRawFrame(http2.FrameSettings, 0, 1, nil))
		}},
		{"PING of 7 bytes", func(c *h2client) { // 6.7: FRAME_SIZE_ERROR
			c.check(c.fr.WriteRawFrame(http2.FramePing, 0, 0, make([]byte, 7)))
		}},
		{"WINDOW_UPDATE of 0 on the connection", func(c *h2client) { // 6.9
			c.check(c.fr.WriteWindowUpdate(0, 0))
		}},
		{"frame past MAX_FRAME_SIZE", func(c *h2client) { // 4.2: FRAME_SIZE_ERROR
			c.check(c.fr.WriteRawFrame(http2.FramePing, 0, 0, make([]byte, maxFrame+1)))
		}},
		{"SETTINGS ACK with a payload", func(c *h2client) { // 6.5
			c.check(c.fr.WriteRawFrame(http2.FrameSettings, http2.FlagSettingsAck, 0, make([]byte, 6)))
		}},
	}
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) { violation(t, tr, tc.bad) })
		}
		// A preface that is not HTTP/2's: the connection is closed (no
		// GOAWAY required, 3.4) and the server serves others.
		t.Run("garbage preface", func(t *testing.T) {
			r := newRig(t, transportYAML, withTransport(tr))
			c := dialRaw(t, r.addr)
			if _, err := io.WriteString(c.conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			c.readToEnd()
			dialH2(t, r.addr).call(1, "new", 1)
		})
	})
}

// gateEngine holds every Decide until released.
type gateEngine struct {
	rls.Engine
	entered chan struct{} // a value per Decide that reached the gate
	release chan struct{}
	once    sync.Once
}

// withGate makes the rig's engine go through a new gateEngine, released
// at the end of the test at the latest.
func withGate(t *testing.T) (*gateEngine, func(*rls.ServerConfig)) {
	g := &gateEngine{entered: make(chan struct{}, 1024), release: make(chan struct{})}
	return g, func(c *rls.ServerConfig) {
		g.Engine = c.Engine
		c.Engine = g
	}
}

func (g *gateEngine) Decide(ctx context.Context, b *engine.Batch) {
	g.entered <- struct{}{}
	<-g.release
	g.Engine.Decide(ctx, b)
}

func (g *gateEngine) open() { g.once.Do(func() { close(g.release) }) }

// waitEntered waits for a Decide to reach the gate.
func (g *gateEngine) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(hangGuard): // a hang guard only
		t.Fatal("no call reached the engine")
	}
}

// TestTransportReset: a stream the client resets, in the middle of its
// request or after all of it (its answer not yet sent), gets nothing more
// once the server has read the RST_STREAM (RFC 9113 6.4; frames the server
// sent before reading it may still arrive, so the client sends a PING
// after the RST_STREAM and checks only what comes after its ACK), and the
// other streams of the connection are served.
func TestTransportReset(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		t.Run("mid-request", func(t *testing.T) {
			r := newRig(t, transportYAML, withTransport(tr))
			c := dialH2(t, r.addr)
			msg := grpcMsg(t, rlsReq("a", 1))
			c.send(1, pathRLS, msg[:7], shape{open: true})
			c.check(c.fr.WriteRSTStream(1, http2.ErrCodeCancel))
			c.ping([8]byte{1})
			mark := len(c.log)
			c.call(3, "b", 2)
			c.ping([8]byte{2})
			for _, f := range c.log[mark:] {
				if f.stream == 1 && f.typ != http2.FramePriority {
					t.Errorf("%v frame on stream 1 after its RST_STREAM was read", f.typ)
				}
			}
		})
		t.Run("after the request", func(t *testing.T) {
			g, gate := withGate(t)
			r := newRig(t, transportYAML, withTransport(tr), gate)
			t.Cleanup(g.open) // before the rig's cleanup
			c := dialH2(t, r.addr)
			c.send(1, pathRLS, grpcMsg(t, rlsReq("a", 1)), shape{})
			g.waitEntered(t)
			c.check(c.fr.WriteRSTStream(1, http2.ErrCodeCancel))
			c.ping([8]byte{1})
			mark := len(c.log)
			g.open() // the reset call's answer is ready now, and must not be sent
			c.call(3, "b", 2)
			// Close waits for the calls in flight: every frame the server
			// sends on this connection is read once it is closed.
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			go r.srv.Close(ctx)
			c.readToEnd()
			for _, f := range c.log[mark:] {
				if f.stream == 1 && f.typ != http2.FramePriority {
					t.Errorf("%v frame on stream 1 after its RST_STREAM was read", f.typ)
				}
			}
		})
	})
}

// TestTransportClose: Close with a call in flight sends a GOAWAY, lets the
// call finish, then closes the connection; after Close, new connections
// are refused.
func TestTransportClose(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		g, gate := withGate(t)
		r := newRig(t, transportYAML, withTransport(tr), gate)
		t.Cleanup(g.open)
		c := dialH2(t, r.addr)
		c.send(1, pathRLS, grpcMsg(t, rlsReq("a", 1)), shape{})
		g.waitEntered(t)
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			r.srv.Close(ctx)
		}()
		c.readUntil("a GOAWAY", func() bool { return len(c.goaways) > 0 })
		g.open()
		c.readUntil("the answer", func() bool { return c.stream(1).ended || c.stream(1).rst })
		checkRLS(t, c.stream(1), 1)
		c.readToEnd()
		select {
		case <-closed:
		case <-time.After(hangGuard): // a hang guard only
			t.Fatal("Close did not return")
		}
		for _, g := range c.goaways {
			if g.lastStreamID < 1 {
				t.Errorf("GOAWAY with last stream id %d: the call on stream 1 was processed", g.lastStreamID)
			}
		}
		if conn, err := net.Dial("tcp", r.addr); err == nil {
			conn.Close()
			t.Error("a new connection after Close was accepted")
		}
	})
}

// TestTransportNoLeaks: after many connections (finished, cut in the
// middle of a frame, closed before or in the middle of the preface, idle
// after it) and Close, no goroutine of the server is left.
func TestTransportNoLeaks(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		before := serverGoroutines()
		r := newRig(t, transportYAML, withTransport(tr))
		for i := range 20 {
			c := dialH2(t, r.addr)
			c.call(1, "l"+strconv.Itoa(i), 1)
			c.conn.Close()
		}
		for range 5 {
			c := dialH2(t, r.addr)
			c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.headerBlock(pathRLS), EndHeaders: true}))
			c.conn.Write([]byte{0, 0, 9, 0}) // a frame header cut short
			c.conn.Close()
		}
		for range 5 {
			dialRaw(t, r.addr).conn.Close()
			c := dialRaw(t, r.addr)
			io.WriteString(c.conn, http2.ClientPreface[:10])
			c.conn.Close()
		}
		quiet := dialH2(t, r.addr)
		quiet.call(1, "q", 1)
		closeAndCheck(t, r, before, quiet)
	})
}

// TestTransportCloseIdle: Close returns (by the end of its context at the
// latest) while a client that connected sent nothing, or half the
// preface, and leaves no goroutine of the server behind. (grpc-go's Stop
// waits for a connection in its handshake until the handshake's timeout:
// 120 s by default, over the context's 30 s; the server sets 10 s, which
// this test waits out on TransportGRPC.)
func TestTransportCloseIdle(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		before := serverGoroutines()
		r := newRig(t, transportYAML, withTransport(tr))
		idle := dialRaw(t, r.addr)
		half := dialRaw(t, r.addr)
		io.WriteString(half.conn, http2.ClientPreface[:10])
		quiet := dialH2(t, r.addr)
		quiet.call(1, "q", 1)
		closeAndCheck(t, r, before, quiet, idle, half)
	})
}

// closeAndCheck closes r's server while reading the connections cs (so
// that the clients answer what the server sends as it drains them, PINGs
// say): the server must close them, Close must return before its context
// ends, and no goroutine of a server may be left but those in before.
func closeAndCheck(t *testing.T, r *rig, before map[string]string, cs ...*h2client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	closed := make(chan struct{})
	go func() { r.srv.Close(ctx); close(closed) }()
	for _, c := range cs {
		c.readToEnd()
	}
	<-closed
	if ctx.Err() != nil {
		t.Fatal("Close did not return before its context ended")
	}
	waitServerGoroutines(t, before)
}

// waitServerGoroutines waits for the server's goroutines (those running or
// started by the code of package rls or of grpc-go's server) that were not
// in before to end.
func waitServerGoroutines(t *testing.T, before map[string]string) {
	t.Helper()
	// Goroutines end on their own once told to; nothing signals it.
	clocktest.EventuallyState(t, hangGuard, "the server's goroutines to end after Close", func() (bool, string) {
		var left []string
		for id, g := range serverGoroutines() {
			if _, ok := before[id]; !ok {
				left = append(left, g)
			}
		}
		return len(left) == 0, fmt.Sprintf("%d left:\n%s", len(left), strings.Join(left, "\n\n"))
	})
}

// serverGoroutines are the stacks of the goroutines of servers (of this
// test or of others' that never closed theirs) by goroutine id.
func serverGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	gs := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, mark := range []string{"sluice/node/rls.", "google.golang.org/grpc.(*Server)", "internal/transport.NewServerTransport", "internal/transport.(*http2Server)", "internal/transport.newHTTP2Server"} {
			if strings.Contains(g, mark) {
				id, _, _ := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
				gs[id] = g
				break
			}
		}
	}
	return gs
}
