package rls

import (
	"golang.org/x/net/http2"
)

// TransportLean's send-side flow control.

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
func removeStream(v []*leanStream, st *leanStream) []*leanStream {
	for i, x := range v {
		if x == st {
			return append(v[:i], v[i+1:]...)
		}
	}
	return v
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
