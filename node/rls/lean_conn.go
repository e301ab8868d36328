package rls

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// leanConn is one HTTP/2 connection. Its reader goroutine (serve) reads
// and answers frames; workers append their responses to wbuf, and
// whoever finds nobody writing writes (see flushLocked). A request's
// stream is touched under wmu only until it has arrived whole (the reader
// adds to it; its deadline may reset it meanwhile, from a timer).
type leanConn struct {
	l      *leanServer
	s      *Server
	nc     net.Conn // a *tls.Conn with ServerConfig.TLS
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
	control    int    // PINGs answered since a request arrived whole
	settings   int    // SETTINGS parameters since a request arrived whole
	raises     int    // of which raises of SETTINGS_INITIAL_WINDOW_SIZE

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
	peerFrame   int    // the peer's SETTINGS_MAX_FRAME_SIZE
	hpackPrefix []byte // put before each header block (a dynamic table size update)
	recvAvail   int64  // what the peer may still send
	unacked     int64  // bytes consumed, not yet given back to the peer
	flow        leanFlow
	bounds      leanBounds
}

func newLeanConn(l *leanServer, nc net.Conn) *leanConn {
	c := &leanConn{l: l, s: l.s, nc: nc, streams: map[uint32]*leanStream{},
		peerFrame: 16384, recvAvail: leanConnWindow, writeTimeout: leanWriteTimeout, release: func() {}}
	c.flow.init()
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

// serve reads the connection's frames until it ends. With TLS, the
// handshake comes first (ALPN h2, and the client's certificate when the
// config requires one); handshake and preface have handshakeTimeout.
func (c *leanConn) serve() {
	defer c.shutdown()
	deadline := time.Now().Add(handshakeTimeout)
	c.nc.SetReadDeadline(deadline)
	if tc, ok := c.nc.(*tls.Conn); ok {
		tc.SetWriteDeadline(deadline)
		if err := tc.HandshakeContext(c.ctx); err != nil {
			c.s.log.Debug("rls: TLS handshake", "remote", c.nc.RemoteAddr().String(), "err", err)
			return
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			c.s.log.Debug("rls: TLS without ALPN h2", "remote", c.nc.RemoteAddr().String(), "alpn", p)
			return
		}
		c.nc.SetWriteDeadline(time.Time{})
	}
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
	c.startIdleLocked()
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
			c.flushRead()
			continue
		}
		var se http2.StreamError
		var ce connError
		switch {
		case errors.As(err, &se):
			c.resetStream(se.StreamID, se.Code)
			c.flushRead()
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
		c.hs = headerState{trailers: f.StreamID <= c.maxID, contentLength: -1} // maxID: the reader's writes
		return c.onHeaderBlock(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.ContinuationFrame: // the Framer checks that it continues c.hdrID's block
		return c.onHeaderBlock(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		c.control++
		if c.control > leanMaxControl {
			return connError{http2.ErrCodeEnhanceYourCalm, "too many PING frames"}
		}
		c.wmu.Lock()
		c.wbuf = appendFrameHeader(c.wbuf, 8, http2.FramePing, http2.FlagPingAck, 0)
		c.wbuf = append(c.wbuf, f.Data[:]...)
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

// onSettings applies the peer's SETTINGS, each parameter in constant time
// (a new SETTINGS_INITIAL_WINDOW_SIZE touches no stream: see leanFlow),
// and acknowledges them. A connection may send maxSettings parameters
// between two requests it sends whole, maxWindowRaises of them raises of
// SETTINGS_INITIAL_WINDOW_SIZE.
func (c *leanConn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	c.settings += max(f.NumSettings(), 1)
	if c.settings > maxSettings {
		return connError{http2.ErrCodeEnhanceYourCalm, "too many SETTINGS parameters"}
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
			if int64(s.Val) > c.flow.peerWin {
				if c.raises++; c.raises > maxWindowRaises {
					return connError{http2.ErrCodeEnhanceYourCalm, "too many raises of SETTINGS_INITIAL_WINDOW_SIZE"}
				}
			}
			if !c.flow.setInitialWindow(int64(s.Val)) {
				return connError{http2.ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE overflows a stream's window"}
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
	c.drainLocked()
	return nil
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
	c.closeNet()
	for _, st := range c.streams {
		c.forgetLocked(st)
	}
	c.stopTimersLocked()
	c.wmu.Unlock()
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	c.release()
	c.l.connsWG.Done()
}
