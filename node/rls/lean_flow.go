package rls

import (
	"container/heap"

	"golang.org/x/net/http2"
)

// TransportLean's send-side flow control, in time independent of the
// number of open streams for every frame the peer sends.
//
// A stream's window is peerWin + its winDelta: a new
// SETTINGS_INITIAL_WINDOW_SIZE changes peerWin alone, which moves every
// stream's window at once (RFC 9113 6.9.2) without touching any. Streams
// whose response the windows hold back wait in blocked, a max-heap by
// winDelta: the streams that may send are at its top, so that a
// WINDOW_UPDATE or SETTINGS pops only streams that then send at least a
// byte, and a frame that frees none costs a look at the top. Streams
// whose winDelta is positive (given more window than the initial one)
// are in granted, a max-heap by winDelta too, whose top tells whether a
// larger SETTINGS_INITIAL_WINDOW_SIZE takes a window past 2^31-1.

// leanFlow is a connection's send windows, under its wmu.
type leanFlow struct {
	sendWin int64 // the peer's connection window
	peerWin int64 // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	blocked winHeap
	granted winHeap
	// pops counts the streams drainLocked has popped, each of which sent
	// a byte or more: the work of the frames that let them (tests count
	// it).
	pops int
}

func (f *leanFlow) init() {
	f.sendWin, f.peerWin = defaultWindow, defaultWindow
	f.blocked.slot, f.granted.slot = 0, 1
}

// window is st's send window.
func (f *leanFlow) window(st *leanStream) int64 { return f.peerWin + st.winDelta }

// setDelta sets st's winDelta, keeping the heaps in order.
func (f *leanFlow) setDelta(st *leanStream, d int64) {
	st.winDelta = d
	switch in := f.granted.has(st); {
	case d > 0 && in:
		heap.Fix(&f.granted, st.heapPos[1]-1)
	case d > 0:
		heap.Push(&f.granted, st)
	case in:
		heap.Remove(&f.granted, st.heapPos[1]-1)
	}
	if f.blocked.has(st) {
		heap.Fix(&f.blocked, st.heapPos[0]-1)
	}
}

// setInitialWindow applies a SETTINGS_INITIAL_WINDOW_SIZE of v; false:
// it would take a stream's window past 2^31-1 (a connection error).
func (f *leanFlow) setInitialWindow(v int64) bool {
	if len(f.granted.s) > 0 && v+f.granted.s[0].winDelta > maxWindow {
		return false
	}
	f.peerWin = v
	return true
}

// drop takes st out of the heaps.
func (f *leanFlow) drop(st *leanStream) {
	if f.blocked.has(st) {
		heap.Remove(&f.blocked, st.heapPos[0]-1)
	}
	if f.granted.has(st) {
		heap.Remove(&f.granted, st.heapPos[1]-1)
	}
}

// onWindowUpdate adds a WINDOW_UPDATE's increment to its window, and
// sends what that lets out.
func (c *leanConn) onWindowUpdate(wu *http2.WindowUpdateFrame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	f := &c.flow
	inc := int64(wu.Increment)
	if wu.StreamID == 0 {
		f.sendWin += inc
		if f.sendWin > maxWindow {
			return connError{http2.ErrCodeFlowControl, "connection window past 2^31-1"}
		}
	} else {
		st := c.streams[wu.StreamID]
		if st == nil {
			if wu.StreamID > c.maxID {
				return connError{http2.ErrCodeProtocol, "WINDOW_UPDATE on an idle stream"}
			}
			return nil // a closed stream
		}
		if f.window(st)+inc > maxWindow {
			c.forgetLocked(st)
			c.wbuf = appendRSTStream(c.wbuf, wu.StreamID, http2.ErrCodeFlowControl)
			return nil
		}
		f.setDelta(st, st.winDelta+inc)
	}
	c.drainLocked()
	return nil
}

// pushLocked writes what flow control lets of st's response, and ends it
// once all is written; the rest waits in blocked.
func (c *leanConn) pushLocked(st *leanStream) {
	f := &c.flow
	if !st.headersSent {
		c.appendHeadersLocked(st.id, leanResponseHeaders, false)
		st.headersSent = true
	}
	for st.sent < len(st.out) {
		n := min(int64(len(st.out)-st.sent), f.sendWin, f.window(st), int64(c.peerFrame))
		if n <= 0 {
			heap.Push(&f.blocked, st)
			return
		}
		c.wbuf = appendFrameHeader(c.wbuf, int(n), http2.FrameData, 0, st.id)
		c.wbuf = append(c.wbuf, st.out[st.sent:st.sent+int(n)]...)
		st.sent += int(n)
		f.sendWin -= n
		f.setDelta(st, st.winDelta-n)
	}
	c.appendHeadersLocked(st.id, leanTrailersOK, true)
	delete(c.streams, st.id)
	f.drop(st)
	c.l.release(st)
	c.doneLocked()
}

// drainLocked pushes the held-back responses that the windows now let
// through: each one popped sends at least a byte.
func (c *leanConn) drainLocked() {
	f := &c.flow
	for f.sendWin > 0 && len(f.blocked.s) > 0 && f.window(f.blocked.s[0]) > 0 {
		f.pops++
		c.pushLocked(heap.Pop(&f.blocked).(*leanStream))
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

// winHeap is a max-heap of streams by winDelta (container/heap's
// interface); slot is which of a stream's heapPos it keeps.
type winHeap struct {
	s    []*leanStream
	slot int
}

func (h *winHeap) has(st *leanStream) bool { return st.heapPos[h.slot] != 0 }
func (h *winHeap) Len() int                { return len(h.s) }
func (h *winHeap) Less(i, j int) bool      { return h.s[i].winDelta > h.s[j].winDelta }

func (h *winHeap) Swap(i, j int) {
	h.s[i], h.s[j] = h.s[j], h.s[i]
	h.s[i].heapPos[h.slot], h.s[j].heapPos[h.slot] = i+1, j+1
}

func (h *winHeap) Push(x any) {
	st := x.(*leanStream)
	h.s = append(h.s, st)
	st.heapPos[h.slot] = len(h.s)
}

func (h *winHeap) Pop() any {
	st := h.s[len(h.s)-1]
	h.s[len(h.s)-1] = nil
	h.s = h.s[:len(h.s)-1]
	st.heapPos[h.slot] = 0
	return st
}
