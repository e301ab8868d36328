package rls

import (
	"crypto/tls"
	"encoding/binary"
	"runtime"
	"time"

	"golang.org/x/net/http2"
)

// TransportLean's writes: frames appended to a connection's buffer,
// written by whoever finds nobody writing, and the graceful and abrupt
// ends of a connection.

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

// flushRead gets written what the reader's frames appended (SETTINGS and
// PING ACKs, resets, window updates, early answers), once the reader is
// about to wait for input: not while the next frame is read in whole
// already, so that the answers to a run of frames go out in one write.
func (c *leanConn) flushRead() {
	if n := c.br.Buffered(); n >= 9 {
		if h, err := c.br.Peek(9); err == nil && n >= 9+(int(h[0])<<16|int(h[1])<<8|int(h[2])) {
			return
		}
	}
	c.wmu.Lock()
	c.flushLocked(true)
	c.wmu.Unlock()
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
	c.closeNet()
}

// closeNet closes the connection at once: with TLS, its TCP connection
// (a tls.Conn's Close writes close_notify, which a peer that does not
// read, or a write under way, would hold up).
func (c *leanConn) closeNet() {
	nc := c.nc
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	nc.Close()
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
	if tc, ok := c.nc.(*tls.Conn); ok {
		// close_notify is a write, which a peer that does not read holds
		// up (5 s at most): not under wmu.
		go func() {
			if tc.CloseWrite() != nil {
				tc.NetConn().Close()
			}
			tc.SetReadDeadline(time.Now().Add(leanGracefulLinger))
		}()
		return
	}
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

// Frames, appended to a buffer.

func appendFrameHeader(b []byte, length int, typ http2.FrameType, flags http2.Flags, id uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), byte(typ), byte(flags),
		byte(id>>24)&0x7f, byte(id>>16), byte(id>>8), byte(id))
}

func appendSettings(b []byte) []byte {
	settings := [...]http2.Setting{
		{ID: http2.SettingMaxConcurrentStreams, Val: maxConcurrentStreams},
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
