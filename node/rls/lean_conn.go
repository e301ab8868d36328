package rls

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// TransportLean's connections: HTTP/2 framing, flow control and stream
// bookkeeping (see the package doc). The calls themselves are in
// lean_call.go.

// Bounds of a TransportLean connection.
const (
	// leanMaxStreams is the SETTINGS_MAX_CONCURRENT_STREAMS advertised:
	// a stream past it, counting calls whose stream the peer reset but
	// whose worker has not finished, is refused (REFUSED_STREAM).
	leanMaxStreams = 1024
	// leanStreamWindow is the SETTINGS_INITIAL_WINDOW_SIZE advertised,
	// larger than a request may be, so that no stream needs a
	// WINDOW_UPDATE.
	leanStreamWindow = 1 << 20
	// leanConnWindow is the connection's receive window; the bytes of a
	// request are given back once the call has decoded it.
	leanConnWindow = 4 << 20
	// leanMaxHeaderList is the SETTINGS_MAX_HEADER_LIST_SIZE advertised
	// (the decoded size of a header block, as RFC 9113 counts it); a
	// header block's encoded bytes are bounded at twice that.
	leanMaxHeaderList = 16 << 10
	// leanMaxHeaderFrames bounds the frames of a header block (HEADERS
	// and its CONTINUATIONs), empty ones included.
	leanMaxHeaderFrames = 128
	// leanMaxPendingWrite is the most bytes a connection holds unwritten:
	// past it, the peer is not reading and is disconnected.
	leanMaxPendingWrite = 4 << 20
	// leanWriteTimeout bounds one write: a peer that reads none of it
	// meanwhile is disconnected, so that no writer (a worker) stays
	// blocked on it.
	leanWriteTimeout = 10 * time.Second
	// leanPrefaceTimeout is how long a new connection has to send the
	// client preface and its SETTINGS.
	leanPrefaceTimeout = 10 * time.Second
	// leanMaxControl is the most PING and SETTINGS frames answered
	// without a stream opened in between: past it, ENHANCE_YOUR_CALM.
	leanMaxControl = 10000
	// leanMaxBuffer is the largest buffer a pooled stream keeps.
	leanMaxBuffer = 64 << 10
	// maxWindow is the largest flow-control window (RFC 9113 6.9.1).
	maxWindow = 1<<31 - 1
	// defaultWindow is HTTP/2's initial window, stream and connection.
	defaultWindow = 65535
	// leanGracefulLinger is how long a connection that has said GOAWAY
	// and finished its calls waits for the peer to close, after shutting
	// down its side, before closing.
	leanGracefulLinger = time.Second
)

// leanServer is TransportLean: connections, the workers that run calls,
// and graceful shutdown.
type leanServer struct {
	s       *Server
	work    chan *leanStream // to an idle worker
	quit    chan struct{}    // closed once the server has stopped: workers end
	stop    chan struct{}    // closed once close begins: accept loops end
	workers sync.WaitGroup   // long-lived workers
	nwork   int              // long-lived workers started, under mu
	streams sync.Pool        // of *leanStream

	mu      sync.Mutex
	closing bool
	lns     map[net.Listener]struct{}
	conns   map[*leanConn]struct{}
	connsWG sync.WaitGroup
}

func newLeanServer(s *Server) *leanServer {
	l := &leanServer{s: s, work: make(chan *leanStream), quit: make(chan struct{}), stop: make(chan struct{}),
		lns: map[net.Listener]struct{}{}, conns: map[*leanConn]struct{}{}}
	l.streams.New = func() any { return &leanStream{} }
	return l
}

// serve accepts connections on ln until close. With ServerConfig.MaxConns
// it holds a slot of sem per connection served, from before its Accept to
// the connection's end, as netutil.LimitListener does: past the limit, new
// connections wait in ln's backlog.
func (l *leanServer) serve(ln net.Listener) error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		ln.Close()
		return nil
	}
	l.lns[ln] = struct{}{}
	l.mu.Unlock()
	defer ln.Close()
	var sem chan struct{}
	release := func() {}
	if n := l.s.cfg.MaxConns; n > 0 {
		sem = make(chan struct{}, n)
		release = func() { <-sem }
	}
	var backoff time.Duration
	for {
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-l.stop:
				return nil
			}
		}
		nc, err := ln.Accept()
		if err != nil {
			release()
			l.mu.Lock()
			closing := l.closing
			l.mu.Unlock()
			if closing {
				return nil
			}
			// A temporary error (out of file descriptors, say) is retried,
			// as net/http and grpc-go do.
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				l.s.log.Warn("rls: accept", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		l.mu.Lock()
		if l.closing {
			l.mu.Unlock()
			nc.Close()
			release()
			return nil
		}
		c := newLeanConn(l, nc)
		c.release = release
		l.conns[c] = struct{}{}
		l.connsWG.Add(1)
		l.mu.Unlock()
		go c.serve()
	}
}

// close stops accepting, says GOAWAY on every connection, lets calls in
// flight finish until ctx ends, then closes the connections.
func (l *leanServer) close(ctx context.Context) {
	l.mu.Lock()
	l.closing = true
	close(l.stop)
	for ln := range l.lns {
		ln.Close()
	}
	conns := make([]*leanConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.goAway()
	}
	done := make(chan struct{})
	go func() { l.connsWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		l.mu.Lock()
		for c := range l.conns {
			c.nc.Close()
		}
		l.mu.Unlock()
		<-done
	}
	close(l.quit)
}

// streamState is where a stream is; moves out of streamReceiving are
// made under its connection's wmu.
type streamState uint8

const (
	streamReceiving streamState = iota // the reader reads its request
	streamDeciding                     // a worker runs its call
	streamSending                      // its response waits for flow-control window
	streamOrphan                       // reset by the peer while deciding: the answer is dropped
)

// leanStream is one call, pooled by the server.
type leanStream struct {
	c      *leanConn
	id     uint32
	method leanMethod
	// The reader's while receiving, then the worker's.
	in    []byte // the request's DATA: the gRPC message and its prefix
	recvd int64  // flow-controlled bytes received
	held  int64  // of which held in in, given back once the call has decoded it
	ended bool   // END_STREAM received
	// The request's DATA bytes, and its content-length (-1: none).
	dataLen, contentLength int64
	// An answer decided from the request's headers (unknown method, say),
	// given once the request ends: earlyStatus is its HTTP status, 0 for
	// none.
	earlyStatus int
	earlyCode   codes.Code
	earlyMsg    string
	// The worker's, then under c.wmu.
	code codes.Code
	msg  string
	out  []byte // the response: the gRPC message and its prefix
	// Under c.wmu.
	state       streamState
	sendWin     int64 // the peer's window for this stream
	sent        int   // bytes of out sent
	headersSent bool
	blocked     bool // in c.blocked
}

// headerState is what the reader keeps of the header block being decoded.
type headerState struct {
	size        int  // decoded size, as RFC 9113 counts it
	trailers    bool // the block ends a stream's request (no pseudo-headers)
	sawRegular  bool
	malformed   bool
	tooLarge    bool
	method      string
	scheme      string
	path        string
	contentType string
	// contentLength is the content-length header's, -1 without one.
	contentLength int64
	pseudo        uint8 // the pseudo-headers seen, a bit each
}

// leanConn is one HTTP/2 connection. Its reader goroutine (serve) reads
// and answers frames; workers append their responses to wbuf, and
// whoever finds nobody writing writes (see flushLocked).
type leanConn struct {
	l      *leanServer
	s      *Server
	nc     net.Conn
	br     *bufio.Reader
	fr     *http2.Framer
	dec    *hpack.Decoder
	ctx    context.Context // the calls', cancelled once the connection ends
	cancel context.CancelFunc
	// writeTimeout is leanWriteTimeout (tests shorten it).
	writeTimeout time.Duration
	// release frees the connection's slot of its listener's MaxConns,
	// once it has ended.
	release func()

	// The reader's own.
	hs         headerState
	hdrID      uint32 // stream of the header block being read
	hdrEnd     bool   // its HEADERS ended the stream
	hdrBytes   int    // encoded bytes of the block so far
	hdrFrames  int    // its frames so far
	hdrSelfDep bool   // its HEADERS made the stream depend on itself
	control    int    // PING and SETTINGS answered since a stream opened

	wmu   sync.Mutex
	wcond sync.Cond // on wmu: writing turned false
	// Under wmu.
	streams     map[uint32]*leanStream
	orphans     int    // streams forgotten while their worker runs
	deciding    int    // calls whose worker runs, orphans included
	maxID       uint32 // highest stream the peer opened
	wbuf        []byte // frames to write
	spare       []byte // wbuf's other buffer
	writing     bool   // someone writes; others only append
	started     bool   // the server's SETTINGS are in wbuf or written
	closed      bool   // nothing more is written
	goingAway   bool   // GOAWAY sent
	lingering   bool   // GOAWAY sent, calls done, write side shut: waiting for the peer to close
	sendWin     int64  // the peer's connection window
	peerWin     int64  // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame   int    // the peer's SETTINGS_MAX_FRAME_SIZE
	hpackPrefix []byte // put before each header block (a dynamic table size update)
	recvAvail   int64  // what the peer may still send
	unacked     int64  // bytes consumed, not yet given back to the peer
	blocked     []*leanStream
	// The idle timeout (ServerConfig.IdleTimeout; nil: none): idle fires
	// every so often, and says GOAWAY once the connection has had no
	// stream since idleSince for the timeout.
	idle      *time.Timer
	idleSince time.Time
}

func newLeanConn(l *leanServer, nc net.Conn) *leanConn {
	c := &leanConn{l: l, s: l.s, nc: nc, streams: map[uint32]*leanStream{},
		sendWin: defaultWindow, peerWin: defaultWindow, peerFrame: 16384, recvAvail: leanConnWindow,
		writeTimeout: leanWriteTimeout, release: func() {}}
	c.wcond.L = &c.wmu
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.br = bufio.NewReaderSize(nc, 16<<10)
	c.fr = http2.NewFramer(io.Discard, c.br) // frames are written by hand
	c.fr.SetReuseFrames()
	c.fr.SetMaxReadFrameSize(16384) // the default, not advertised
	c.dec = hpack.NewDecoder(4096, c.onField)
	c.dec.SetMaxStringLength(leanMaxHeaderList)
	return c
}

// connError ends the connection with GOAWAY(code).
type connError struct {
	code   http2.ErrCode
	reason string
}

func (e connError) Error() string { return "http2: " + e.code.String() + ": " + e.reason }

// serve reads the connection's frames until it ends.
func (c *leanConn) serve() {
	defer c.shutdown()
	c.nc.SetReadDeadline(time.Now().Add(leanPrefaceTimeout))
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, preface[:]); err != nil || string(preface[:]) != http2.ClientPreface {
		return
	}
	c.wmu.Lock()
	if c.closed { // Close came first
		c.wmu.Unlock()
		return
	}
	c.started = true
	if d := c.s.cfg.IdleTimeout; d > 0 {
		c.idleSince = time.Now()
		c.idle = time.AfterFunc(d, c.idleCheck)
	}
	c.wbuf = appendSettings(c.wbuf)
	c.wbuf = appendWindowUpdate(c.wbuf, 0, leanConnWindow-defaultWindow)
	c.flushLocked(true)
	c.wmu.Unlock()
	first := true
	for {
		err := c.readFrame(first)
		if err == nil {
			if first {
				first = false
				c.nc.SetReadDeadline(time.Time{})
			}
			continue
		}
		var se http2.StreamError
		var ce connError
		switch {
		case errors.As(err, &se):
			c.resetStream(se.StreamID, se.Code)
			continue
		case errors.As(err, &ce):
			c.s.log.Debug("rls: connection error", "remote", c.nc.RemoteAddr().String(), "err", err)
			c.sendGoAway(ce.code, ce.reason)
		}
		return
	}
}

// readFrame reads one frame and handles it. The first frame must be the
// client's SETTINGS.
func (c *leanConn) readFrame(first bool) error {
	fh, err := c.fr.ReadFrameHeader()
	if err != nil {
		if errors.Is(err, http2.ErrFrameTooLarge) {
			return connError{http2.ErrCodeFrameSize, "frame larger than 16384 bytes"}
		}
		return err
	}
	if first && (fh.Type != http2.FrameSettings || fh.Flags.Has(http2.FlagSettingsAck)) {
		return connError{http2.ErrCodeProtocol, "the client preface does not end with SETTINGS"}
	}
	f, err := c.fr.ReadFrameForHeader(fh)
	if err != nil {
		var ce http2.ConnectionError
		var se http2.StreamError
		switch {
		case errors.As(err, &ce):
			reason := "invalid " + fh.Type.String() + " frame"
			if d := c.fr.ErrorDetail(); d != nil {
				reason = d.Error()
			}
			return connError{http2.ErrCode(ce), reason}
		case errors.As(err, &se) && (fh.Type == http2.FrameHeaders || fh.Type == http2.FrameContinuation):
			// The header block was not decoded: HPACK's state is lost.
			return connError{se.Code, "invalid " + fh.Type.String() + " frame"}
		}
		return err
	}
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.HeadersFrame:
		if f.StreamID%2 == 0 {
			return connError{http2.ErrCodeProtocol, "HEADERS on an even stream"}
		}
		c.hdrID, c.hdrEnd, c.hdrBytes, c.hdrFrames = f.StreamID, f.StreamEnded(), 0, 0
		c.hdrSelfDep = f.HasPriority() && f.Priority.StreamDep == f.StreamID
		c.hs = headerState{trailers: f.StreamID <= c.maxID, contentLength: -1}
		return c.onHeaderBlock(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.ContinuationFrame: // the Framer checks that it continues c.hdrID's block
		return c.onHeaderBlock(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		if err := c.countControl(); err != nil {
			return err
		}
		c.wmu.Lock()
		c.wbuf = appendFrameHeader(c.wbuf, 8, http2.FramePing, http2.FlagPingAck, 0)
		c.wbuf = append(c.wbuf, f.Data[:]...)
		c.flushLocked(true)
		c.wmu.Unlock()
		return nil
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.RSTStreamFrame:
		c.wmu.Lock()
		defer c.wmu.Unlock()
		if f.StreamID > c.maxID {
			return connError{http2.ErrCodeProtocol, "RST_STREAM on an idle stream"}
		}
		if st := c.streams[f.StreamID]; st != nil {
			c.forgetLocked(st)
			c.flushLocked(true)
		}
		return nil
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol} // RFC 9113 5.3.1
		}
		return nil
	case *http2.PushPromiseFrame:
		return connError{http2.ErrCodeProtocol, "PUSH_PROMISE from a client"}
	}
	return nil // GOAWAY (the peer opens no more streams: nothing to do) and unknown frames
}

// countControl counts a PING or SETTINGS to answer.
func (c *leanConn) countControl() error {
	c.control++
	if c.control > leanMaxControl {
		return connError{http2.ErrCodeEnhanceYourCalm, "too many PING or SETTINGS frames"}
	}
	return nil
}

func (c *leanConn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	if err := c.countControl(); err != nil {
		return err
	}
	if err := f.ForeachSetting(func(s http2.Setting) error { return s.Valid() }); err != nil {
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			return connError{http2.ErrCode(ce), "invalid SETTINGS value"}
		}
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingHeaderTableSize:
			// The response blocks use no dynamic table; a smaller table
			// than the default must still be acknowledged by a size
			// update (RFC 7541 4.2), here to 0 before every block.
			if s.Val < 4096 {
				c.hpackPrefix = []byte{0x20}
			}
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.peerWin
			c.peerWin = int64(s.Val)
			for _, st := range c.streams {
				st.sendWin += delta
				if st.sendWin > maxWindow {
					return connError{http2.ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE overflows a stream's window"}
				}
			}
		case http2.SettingMaxFrameSize:
			c.peerFrame = int(s.Val)
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.wbuf = appendFrameHeader(c.wbuf, 0, http2.FrameSettings, http2.FlagSettingsAck, 0)
	c.unblockLocked()
	c.flushLocked(true)
	return nil
}

func (c *leanConn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		c.sendWin += inc
		if c.sendWin > maxWindow {
			return connError{http2.ErrCodeFlowControl, "connection window past 2^31-1"}
		}
	} else {
		st := c.streams[f.StreamID]
		if st == nil {
			if f.StreamID > c.maxID {
				return connError{http2.ErrCodeProtocol, "WINDOW_UPDATE on an idle stream"}
			}
			return nil // a closed stream
		}
		st.sendWin += inc
		if st.sendWin > maxWindow {
			c.forgetLocked(st)
			c.wbuf = appendRSTStream(c.wbuf, f.StreamID, http2.ErrCodeFlowControl)
			c.flushLocked(true)
			return nil
		}
	}
	c.unblockLocked()
	c.flushLocked(true)
	return nil
}

// onData takes a DATA frame's bytes into its stream's request.
func (c *leanConn) onData(f *http2.DataFrame) error {
	id, n := f.StreamID, int64(f.Length)
	data := f.Data()
	c.wmu.Lock()
	if n > c.recvAvail {
		c.wmu.Unlock()
		return connError{http2.ErrCodeFlowControl, "DATA past the connection's window"}
	}
	c.recvAvail -= n
	st := c.streams[id]
	if st == nil || st.state != streamReceiving || st.ended {
		c.giveBackLocked(n)
		c.flushLocked(true)
		c.wmu.Unlock()
		if id > c.maxID {
			return connError{http2.ErrCodeProtocol, "DATA on an idle stream"}
		}
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	if pad := n - int64(len(data)); pad > 0 {
		c.giveBackLocked(pad)
		c.flushLocked(true)
	}
	c.wmu.Unlock()
	st.recvd += n
	st.dataLen += int64(len(data))
	switch {
	case st.recvd > leanStreamWindow:
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	case st.contentLength >= 0 && st.dataLen > st.contentLength:
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	case st.earlyStatus != 0: // answered once the request ends: the data is dropped
		c.wmu.Lock()
		c.giveBackLocked(int64(len(data)))
		c.flushLocked(true)
		c.wmu.Unlock()
		if f.StreamEnded() {
			return c.endStream(st)
		}
		return nil
	}
	st.in = append(st.in, data...)
	st.held += int64(len(data))
	if len(st.in) >= 5 {
		size := binary.BigEndian.Uint32(st.in[1:5])
		switch {
		case st.in[0] == 1:
			c.answerEarly(st, 200, codes.Unimplemented, "compressed messages are not supported: send them uncompressed (grpc-encoding identity)")
			return nil
		case st.in[0] != 0:
			c.answerEarly(st, 200, codes.Internal, "invalid gRPC message flags")
			return nil
		case size > maxRecvMsgSize:
			c.answerEarly(st, 200, codes.ResourceExhausted, "received message larger than max ("+strconv.Itoa(int(size))+" vs. "+strconv.Itoa(maxRecvMsgSize)+")")
			return nil
		case len(st.in) > 5+int(size):
			c.answerEarly(st, 200, codes.Internal, "more than one request message in a unary call")
			return nil
		}
	}
	if f.StreamEnded() {
		return c.endStream(st)
	}
	return nil
}

// onHeaderBlock decodes a fragment of the header block of c.hdrID.
func (c *leanConn) onHeaderBlock(frag []byte, end bool) error {
	c.hdrBytes += len(frag)
	c.hdrFrames++
	if c.hdrBytes > 2*leanMaxHeaderList || c.hdrFrames > leanMaxHeaderFrames {
		return connError{http2.ErrCodeEnhanceYourCalm, "header block too large"}
	}
	if _, err := c.dec.Write(frag); err != nil {
		return connError{http2.ErrCodeCompression, err.Error()}
	}
	if !end {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return connError{http2.ErrCodeCompression, err.Error()}
	}
	return c.onHeaders()
}

// Pseudo-headers, a bit each in headerState.pseudo.
const (
	pseudoMethod = 1 << iota
	pseudoScheme
	pseudoPath
	pseudoAuthority
)

// onField takes a decoded header field (hpack.Decoder's emit function).
func (c *leanConn) onField(f hpack.HeaderField) {
	h := &c.hs
	h.size += int(f.Size())
	if h.size > leanMaxHeaderList {
		h.tooLarge = true
	}
	if h.malformed || h.tooLarge {
		return // decoded all the same: the table must follow the peer's
	}
	if f.IsPseudo() {
		var bit uint8
		switch f.Name {
		case ":method":
			bit, h.method = pseudoMethod, f.Value
		case ":scheme":
			bit, h.scheme = pseudoScheme, f.Value
		case ":path":
			bit, h.path = pseudoPath, f.Value
		case ":authority":
			bit = pseudoAuthority
		}
		if bit == 0 || h.trailers || h.sawRegular || h.pseudo&bit != 0 || !httpguts.ValidHeaderFieldValue(f.Value) {
			h.malformed = true
		}
		h.pseudo |= bit
		return
	}
	h.sawRegular = true
	if !validFieldName(f.Name) || !httpguts.ValidHeaderFieldValue(f.Value) {
		h.malformed = true
		return
	}
	switch f.Name {
	case "content-type":
		h.contentType = f.Value
	case "te":
		h.malformed = f.Value != "trailers"
	case "content-length":
		n, err := strconv.ParseInt(f.Value, 10, 64)
		if err != nil || n < 0 || (h.contentLength >= 0 && n != h.contentLength) {
			h.malformed = true
		}
		h.contentLength = n
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		h.malformed = true // connection-specific (RFC 9113 8.2.2)
	}
}

// validFieldName reports whether name is a lower-case token.
func validFieldName(name string) bool {
	for i := 0; i < len(name); i++ {
		if b := name[i]; 'A' <= b && b <= 'Z' {
			return false
		}
	}
	return httpguts.ValidHeaderFieldName(name)
}

// onHeaders acts on a decoded header block: a new stream's request
// headers, or a request's trailers.
func (c *leanConn) onHeaders() error {
	id, h := c.hdrID, &c.hs
	c.hdrID = 0
	if h.trailers {
		c.wmu.Lock()
		st := c.streams[id]
		c.wmu.Unlock()
		switch {
		case st == nil:
			return connError{http2.ErrCodeProtocol, "HEADERS on a closed stream, or a stream identifier lower than one opened"}
		case st.ended || st.state != streamReceiving:
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
		case !c.hdrEnd || h.malformed || h.tooLarge || c.hdrSelfDep:
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
		}
		return c.endStream(st)
	}
	c.control = 0
	c.wmu.Lock()
	c.maxID = id
	c.idleIfDoneLocked() // a new stream on an idle connection, served or not, restarts its idle time
	refuse := c.goingAway || len(c.streams)+c.orphans >= leanMaxStreams
	c.wmu.Unlock()
	const required = pseudoMethod | pseudoScheme | pseudoPath
	switch {
	case h.malformed || c.hdrSelfDep || (!h.tooLarge && h.pseudo&required != required):
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	case refuse:
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeRefusedStream}
	}
	st := c.l.streams.Get().(*leanStream)
	st.c, st.id, st.contentLength = c, id, h.contentLength
	c.wmu.Lock()
	st.state, st.sendWin = streamReceiving, c.peerWin
	c.streams[id] = st
	c.wmu.Unlock()
	// A request the headers already refuse is answered once it ends (its
	// DATA dropped), so that the stream's rules (content-length, flow
	// control) still apply to it.
	switch {
	case h.tooLarge:
		st.answerLater(200, codes.ResourceExhausted, "header list larger than "+strconv.Itoa(leanMaxHeaderList)+" bytes")
	case h.method != "POST":
		st.answerLater(405, codes.Internal, "method "+h.method+": gRPC calls are POST")
	case !grpcContentType(h.contentType):
		st.answerLater(415, codes.Internal, "content-type "+h.contentType+": not application/grpc")
	case h.path == pathShouldRateLimit:
		st.method = methodRLS
	case h.path == pathHealthCheck:
		st.method = methodHealth
	default:
		st.answerLater(200, codes.Unimplemented, "unknown method "+h.path+" (this server serves ShouldRateLimit and Health/Check)")
	}
	if c.hdrEnd {
		return c.endStream(st)
	}
	return nil
}

// answerLater sets the answer st gets once its request ends.
func (st *leanStream) answerLater(httpStatus int, code codes.Code, msg string) {
	st.earlyStatus, st.earlyCode, st.earlyMsg = httpStatus, code, msg
}

// grpcContentType reports whether ct is application/grpc, with the proto
// subtype or none, and parameters or none.
func grpcContentType(ct string) bool {
	rest, ok := strings.CutPrefix(ct, "application/grpc")
	if !ok {
		return false
	}
	rest = strings.TrimPrefix(rest, "+proto")
	return rest == "" || rest[0] == ';'
}

// endStream acts on st's END_STREAM: its call goes to a worker, or it
// gets the answer its headers decided.
func (c *leanConn) endStream(st *leanStream) error {
	st.ended = true
	switch {
	case st.contentLength >= 0 && st.dataLen != st.contentLength: // malformed (RFC 9113 8.1.1)
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	case st.earlyStatus != 0:
		c.answerEarly(st, st.earlyStatus, st.earlyCode, st.earlyMsg)
		return nil
	case len(st.in) < 5 || len(st.in) < 5+int(binary.BigEndian.Uint32(st.in[1:5])):
		c.answerEarly(st, 200, codes.Internal, "the request ended before a whole message")
		return nil
	}
	c.wmu.Lock()
	st.state = streamDeciding
	c.deciding++
	c.wmu.Unlock()
	c.l.dispatch(st)
	return nil
}

// resetStream sends RST_STREAM(code) on id and forgets the stream.
func (c *leanConn) resetStream(id uint32, code http2.ErrCode) {
	c.wmu.Lock()
	if st := c.streams[id]; st != nil {
		c.forgetLocked(st)
	}
	c.wbuf = appendRSTStream(c.wbuf, id, code)
	c.flushLocked(true)
	c.wmu.Unlock()
}

// answerEarly answers st, still receiving, with an error before its call
// runs, and forgets it (RST_STREAM(NO_ERROR) when the peer has more to
// send, RFC 9113 8.1).
func (c *leanConn) answerEarly(st *leanStream, httpStatus int, code codes.Code, msg string) {
	c.wmu.Lock()
	c.appendHeadersLocked(st.id, trailersOnly(httpStatus, code, msg), true)
	if !st.ended {
		c.wbuf = appendRSTStream(c.wbuf, st.id, http2.ErrCodeNo)
	}
	c.forgetLocked(st)
	c.flushLocked(true)
	c.wmu.Unlock()
}

// forgetLocked removes st from the connection: released, or left to its
// worker (which drops the answer).
func (c *leanConn) forgetLocked(st *leanStream) {
	delete(c.streams, st.id)
	switch st.state {
	case streamDeciding:
		st.state = streamOrphan
		c.orphans++
		return
	case streamSending:
		if st.blocked {
			c.blocked = removeStream(c.blocked, st)
		}
	}
	c.giveBackLocked(st.held)
	c.l.release(st)
	c.idleIfDoneLocked()
	c.lingerIfDoneLocked()
}

// idleIfDoneLocked starts the connection's idle time once its last
// stream is gone (a stream whose worker runs, reset by the peer or not,
// keeps it busy).
func (c *leanConn) idleIfDoneLocked() {
	if c.idle != nil && len(c.streams) == 0 && c.orphans == 0 {
		c.idleSince = time.Now()
	}
}

// idleCheck, the idle timer's, says GOAWAY on a connection that has had no
// stream for the idle timeout, as Close does on every connection: its
// drain closes it. A busy connection, or one idle for less, checks again
// when it may have been idle for the timeout.
func (c *leanConn) idleCheck() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed || c.goingAway {
		return
	}
	d := c.s.cfg.IdleTimeout
	if len(c.streams) > 0 || c.orphans > 0 {
		c.idle.Reset(d)
		return
	}
	if left := d - time.Since(c.idleSince); left > 0 {
		c.idle.Reset(left)
		return
	}
	c.goAwayLocked()
}

func removeStream(v []*leanStream, st *leanStream) []*leanStream {
	for i, x := range v {
		if x == st {
			return append(v[:i], v[i+1:]...)
		}
	}
	return v
}

// finish sends st's answer, its worker done.
func (c *leanConn) finish(st *leanStream) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.deciding--
	c.giveBackLocked(st.held)
	st.held = 0
	switch {
	case st.state == streamOrphan:
		c.orphans--
		c.l.release(st)
		c.idleIfDoneLocked()
		c.flushLocked(false)
		c.lingerIfDoneLocked()
		return
	case c.closed:
		delete(c.streams, st.id)
		c.l.release(st)
		return
	case st.code != codes.OK:
		c.appendHeadersLocked(st.id, trailersOnly(200, st.code, st.msg), true)
		delete(c.streams, st.id)
		c.l.release(st)
		c.idleIfDoneLocked()
	default:
		st.state = streamSending
		c.pushLocked(st)
	}
	c.flushLocked(false)
}

// pushLocked writes what flow control lets of st's response, and ends it
// once all is written; the rest waits in c.blocked for a WINDOW_UPDATE.
func (c *leanConn) pushLocked(st *leanStream) {
	if !st.headersSent {
		c.appendHeadersLocked(st.id, leanResponseHeaders, false)
		st.headersSent = true
	}
	for st.sent < len(st.out) {
		n := min(int64(len(st.out)-st.sent), c.sendWin, st.sendWin, int64(c.peerFrame))
		if n <= 0 {
			if !st.blocked {
				st.blocked = true
				c.blocked = append(c.blocked, st)
			}
			return
		}
		c.wbuf = appendFrameHeader(c.wbuf, int(n), http2.FrameData, 0, st.id)
		c.wbuf = append(c.wbuf, st.out[st.sent:st.sent+int(n)]...)
		st.sent += int(n)
		c.sendWin -= n
		st.sendWin -= n
	}
	c.appendHeadersLocked(st.id, leanTrailersOK, true)
	delete(c.streams, st.id)
	c.l.release(st)
	c.idleIfDoneLocked()
	c.lingerIfDoneLocked()
}

// unblockLocked pushes the responses waiting for window.
func (c *leanConn) unblockLocked() {
	if len(c.blocked) == 0 || c.sendWin <= 0 {
		return
	}
	blocked := c.blocked
	c.blocked = nil
	for i, st := range blocked {
		st.blocked = false
		c.pushLocked(st)
		blocked[i] = nil
	}
}

// giveBackLocked returns n consumed bytes to the peer's connection window,
// in WINDOW_UPDATEs of a quarter of the window or more.
func (c *leanConn) giveBackLocked(n int64) {
	c.unacked += n
	if c.unacked >= leanConnWindow/4 && !c.closed {
		c.wbuf = appendWindowUpdate(c.wbuf, 0, uint32(c.unacked))
		c.recvAvail += c.unacked
		c.unacked = 0
	}
}

// appendHeadersLocked appends a HEADERS frame of block on stream id.
func (c *leanConn) appendHeadersLocked(id uint32, block []byte, endStream bool) {
	flags := http2.FlagHeadersEndHeaders
	if endStream {
		flags |= http2.FlagHeadersEndStream
	}
	c.wbuf = appendFrameHeader(c.wbuf, len(c.hpackPrefix)+len(block), http2.FrameHeaders, flags, id)
	c.wbuf = append(append(c.wbuf, c.hpackPrefix...), block...)
}

// flushLocked gets wbuf written: by a goroutine of its own (async, for
// the reader, which must not block on a peer that does not read) or by
// the caller, unless someone writes already (who writes what is
// appended meanwhile). The writer writes outside the lock, swapping
// buffers, until nothing is left.
func (c *leanConn) flushLocked(async bool) {
	if c.closed {
		c.wbuf = c.wbuf[:0]
		return
	}
	if len(c.wbuf) > leanMaxPendingWrite {
		c.s.log.Debug("rls: peer does not read its responses: disconnected", "remote", c.nc.RemoteAddr().String())
		c.closeLocked()
		return
	}
	if c.writing || len(c.wbuf) == 0 {
		return
	}
	c.writing = true
	if async {
		go func() {
			c.wmu.Lock()
			c.writeLocked()
			c.wmu.Unlock()
		}()
		return
	}
	c.writeLocked()
}

func (c *leanConn) writeLocked() {
	if c.deciding > 0 {
		// Other calls are about to answer: let them append theirs, so
		// that one write carries them all.
		c.wmu.Unlock()
		runtime.Gosched()
		c.wmu.Lock()
	}
	for len(c.wbuf) > 0 && !c.closed {
		buf, timeout := c.wbuf, c.writeTimeout
		c.wbuf, c.spare = c.spare[:0], nil
		c.wmu.Unlock()
		err := c.nc.SetWriteDeadline(time.Now().Add(timeout))
		if err == nil {
			_, err = c.nc.Write(buf)
		}
		c.wmu.Lock()
		if cap(buf) <= leanMaxBuffer {
			c.spare = buf[:0]
		}
		if err != nil {
			c.closeLocked()
		}
	}
	c.writing = false
	c.wcond.Broadcast()
	c.lingerIfDoneLocked()
}

// closeLocked closes the connection: nothing more is written, the reader
// ends.
func (c *leanConn) closeLocked() {
	c.closed = true
	c.wbuf = nil
	c.nc.Close()
}

// goAway starts a graceful close: GOAWAY(NO_ERROR) naming the last
// stream opened; later streams are refused; the connection closes once
// its calls are answered.
func (c *leanConn) goAway() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.goAwayLocked()
}

func (c *leanConn) goAwayLocked() {
	if c.closed || c.goingAway {
		return
	}
	if !c.started { // no preface yet: no GOAWAY before the server's SETTINGS
		c.closeLocked()
		return
	}
	c.goingAway = true
	c.wbuf = appendGoAway(c.wbuf, c.maxID, http2.ErrCodeNo, "")
	c.flushLocked(true)
	c.lingerIfDoneLocked()
}

// lingerIfDoneLocked shuts the write side of a connection that said
// GOAWAY once its calls are answered and written, so that the peer reads
// everything and closes; the reader closes the connection then, or after
// leanGracefulLinger.
func (c *leanConn) lingerIfDoneLocked() {
	if !c.goingAway || c.lingering || c.closed || c.writing || len(c.wbuf) > 0 || len(c.streams) > 0 || c.orphans > 0 {
		return
	}
	c.lingering = true
	c.closed = true // nothing more to write
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		c.nc.SetReadDeadline(time.Now().Add(leanGracefulLinger))
		return
	}
	c.nc.Close()
}

// sendGoAway ends the connection on an error: GOAWAY(code), written by
// shutdown.
func (c *leanConn) sendGoAway(code http2.ErrCode, reason string) {
	c.wmu.Lock()
	if !c.closed && c.started {
		c.goingAway = true
		c.wbuf = appendGoAway(c.wbuf, c.maxID, code, reason)
	}
	c.wmu.Unlock()
}

// shutdown ends the connection once its reader stops: what is left in
// wbuf is written (a GOAWAY, say; within a second), calls still deciding
// have their context cancelled and their answers dropped.
func (c *leanConn) shutdown() {
	c.cancel()
	c.wmu.Lock()
	if !c.closed && (c.writing || len(c.wbuf) > 0) {
		c.writeTimeout = time.Second // for what is left: a GOAWAY, say
		c.nc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
		for c.writing {
			c.wcond.Wait()
		}
		if len(c.wbuf) > 0 && !c.closed {
			c.writing = true
			c.writeLocked()
		}
	}
	c.closed = true
	c.wbuf = nil
	c.nc.Close()
	for id, st := range c.streams {
		delete(c.streams, id)
		if st.state == streamDeciding {
			st.state = streamOrphan
			c.orphans++
			continue
		}
		c.l.release(st)
	}
	c.blocked = nil
	if c.idle != nil {
		c.idle.Stop()
	}
	c.wmu.Unlock()
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	c.release()
	c.l.connsWG.Done()
}

// Frames, appended to a buffer.

func appendFrameHeader(b []byte, length int, typ http2.FrameType, flags http2.Flags, id uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), byte(typ), byte(flags),
		byte(id>>24)&0x7f, byte(id>>16), byte(id>>8), byte(id))
}

func appendSettings(b []byte) []byte {
	settings := [...]http2.Setting{
		{ID: http2.SettingMaxConcurrentStreams, Val: leanMaxStreams},
		{ID: http2.SettingInitialWindowSize, Val: leanStreamWindow},
		{ID: http2.SettingMaxHeaderListSize, Val: leanMaxHeaderList},
	}
	b = appendFrameHeader(b, 6*len(settings), http2.FrameSettings, 0, 0)
	for _, s := range settings {
		b = binary.BigEndian.AppendUint16(b, uint16(s.ID))
		b = binary.BigEndian.AppendUint32(b, s.Val)
	}
	return b
}

func appendWindowUpdate(b []byte, id, inc uint32) []byte {
	b = appendFrameHeader(b, 4, http2.FrameWindowUpdate, 0, id)
	return binary.BigEndian.AppendUint32(b, inc&0x7fffffff)
}

func appendRSTStream(b []byte, id uint32, code http2.ErrCode) []byte {
	b = appendFrameHeader(b, 4, http2.FrameRSTStream, 0, id)
	return binary.BigEndian.AppendUint32(b, uint32(code))
}

func appendGoAway(b []byte, lastID uint32, code http2.ErrCode, debug string) []byte {
	if len(debug) > 256 {
		debug = debug[:256]
	}
	b = appendFrameHeader(b, 8+len(debug), http2.FrameGoAway, 0, 0)
	b = binary.BigEndian.AppendUint32(b, lastID&0x7fffffff)
	b = binary.BigEndian.AppendUint32(b, uint32(code))
	return append(b, debug...)
}
