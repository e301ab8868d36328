package rls

import (
	"encoding/binary"
	"strconv"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// TransportLean's streams: a request's headers and DATA, taken in under
// the connection's wmu until the request has arrived whole (a timer may
// reset it meanwhile: see lean_bounds.go), then its call (lean_call.go)
// and its answer.

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
	// Under c.wmu while receiving, then the worker's.
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
	// Until the request has arrived whole: when its HEADERS came, its
	// charge (see lean_bounds.go), its place in c.bounds.unfinished.
	start  time.Time
	charge int64
	queue  fifoLinks[*leanStream]
	// The worker's, then under c.wmu.
	code codes.Code
	msg  string
	out  []byte // the response: the gRPC message and its prefix
	// Under c.wmu.
	state       streamState
	sent        int // bytes of out sent
	headersSent bool
	// The peer's window for the stream less its
	// SETTINGS_INITIAL_WINDOW_SIZE (see leanFlow), and the stream's
	// places in leanFlow's heaps, plus one (0: not in).
	winDelta int64
	heapPos  [2]int
}

func (st *leanStream) links() *fifoLinks[*leanStream] { return &st.queue }

// onHeaders acts on a decoded header block: a new stream's request
// headers, or a request's trailers.
func (c *leanConn) onHeaders() error {
	id, h := c.hdrID, &c.hs
	c.hdrID = 0
	if h.trailers {
		c.wmu.Lock()
		st := c.streams[id]
		var err error
		dispatch := false
		switch {
		case st == nil:
			err = connError{http2.ErrCodeProtocol, "HEADERS on a closed stream, or a stream identifier lower than one opened"}
		case st.ended || st.state != streamReceiving:
			err = http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
		case !c.hdrEnd || h.malformed || h.tooLarge || c.hdrSelfDep:
			err = http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
		default:
			dispatch, err = c.endStreamLocked(st)
		}
		c.wmu.Unlock()
		if dispatch {
			c.l.dispatch(st)
		}
		return err
	}
	c.wmu.Lock()
	c.maxID = id
	refuse := c.goingAway || len(c.streams)+c.orphans >= maxConcurrentStreams
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
	c.wmu.Lock()
	st.state = streamReceiving
	c.streams[id] = st
	var err error
	dispatch := false
	if c.hdrEnd {
		dispatch, err = c.endStreamLocked(st)
	} else if !c.openLocked(st) {
		c.refuseLocked(st)
	}
	c.wmu.Unlock()
	if dispatch {
		c.l.dispatch(st)
	}
	return err
}

// answerLater sets the answer st gets once its request ends.
func (st *leanStream) answerLater(httpStatus int, code codes.Code, msg string) {
	st.earlyStatus, st.earlyCode, st.earlyMsg = httpStatus, code, msg
}

// endStreamLocked acts on st's END_STREAM: it reports whether st's call
// goes to a worker (dispatched by the caller, once wmu is released), or
// gives st the answer its headers decided. A request received whole
// resets the connection's counts of PINGs and SETTINGS parameters.
func (c *leanConn) endStreamLocked(st *leanStream) (dispatch bool, err error) {
	st.ended = true
	c.finishedLocked(st)
	c.control, c.settings, c.raises = 0, 0, 0
	c.activeLocked()
	switch {
	case st.contentLength >= 0 && st.dataLen != st.contentLength: // malformed (RFC 9113 8.1.1)
		return false, http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	case st.earlyStatus != 0:
		c.answerEarlyLocked(st, st.earlyStatus, st.earlyCode, st.earlyMsg)
		return false, nil
	case len(st.in) < 5 || len(st.in) < 5+int(binary.BigEndian.Uint32(st.in[1:5])):
		c.answerEarlyLocked(st, 200, codes.Internal, "the request ended before a whole message")
		return false, nil
	}
	st.state = streamDeciding
	c.deciding++
	return true, nil
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
		c.wmu.Unlock()
		if id > c.maxID {
			return connError{http2.ErrCodeProtocol, "DATA on an idle stream"}
		}
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	if pad := n - int64(len(data)); pad > 0 {
		c.giveBackLocked(pad)
	}
	st.recvd += n
	st.dataLen += int64(len(data))
	dispatch, err := c.takeDataLocked(st, data, f.StreamEnded())
	c.wmu.Unlock()
	if dispatch {
		c.l.dispatch(st)
	}
	return err
}

// takeDataLocked adds a DATA frame's data to st's request, and ends the
// request with END_STREAM.
func (c *leanConn) takeDataLocked(st *leanStream, data []byte, end bool) (dispatch bool, err error) {
	switch {
	case st.recvd > leanStreamWindow:
		return false, http2.StreamError{StreamID: st.id, Code: http2.ErrCodeFlowControl}
	case st.contentLength >= 0 && st.dataLen > st.contentLength:
		return false, http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	case st.earlyStatus != 0: // answered once the request ends: the data is dropped
		c.giveBackLocked(int64(len(data)))
		if end {
			return c.endStreamLocked(st)
		}
		return false, nil
	}
	grown := cap(st.in)
	st.in = append(st.in, data...)
	st.held += int64(len(data))
	if len(st.in) >= 5 {
		size := binary.BigEndian.Uint32(st.in[1:5])
		switch {
		case st.in[0] == 1:
			c.answerEarlyLocked(st, 200, codes.Unimplemented, "compressed messages are not supported: send them uncompressed (grpc-encoding identity)")
			return false, nil
		case st.in[0] != 0:
			c.answerEarlyLocked(st, 200, codes.Internal, "invalid gRPC message flags")
			return false, nil
		case size > maxRecvMsgSize:
			c.answerEarlyLocked(st, 200, codes.ResourceExhausted, "received message larger than max ("+strconv.Itoa(int(size))+" vs. "+strconv.Itoa(maxRecvMsgSize)+")")
			return false, nil
		case len(st.in) > 5+int(size):
			c.answerEarlyLocked(st, 200, codes.Internal, "more than one request message in a unary call")
			return false, nil
		}
	}
	if end {
		return c.endStreamLocked(st)
	}
	if grown = cap(st.in) - grown; grown > 0 && !c.chargeLocked(st, int64(grown)) {
		c.refuseLocked(st)
	}
	return false, nil
}

// resetStream sends RST_STREAM(code) on id and forgets the stream.
func (c *leanConn) resetStream(id uint32, code http2.ErrCode) {
	c.wmu.Lock()
	if st := c.streams[id]; st != nil {
		c.forgetLocked(st)
	}
	c.wbuf = appendRSTStream(c.wbuf, id, code)
	c.wmu.Unlock()
}

// answerEarlyLocked answers st, still receiving, with an error before its
// call runs, and forgets it (RST_STREAM(NO_ERROR) when the peer has more
// to send, RFC 9113 8.1).
func (c *leanConn) answerEarlyLocked(st *leanStream, httpStatus int, code codes.Code, msg string) {
	c.appendHeadersLocked(st.id, trailersOnly(httpStatus, code, msg), true)
	if !st.ended {
		c.wbuf = appendRSTStream(c.wbuf, st.id, http2.ErrCodeNo)
	}
	c.forgetLocked(st)
}

// forgetLocked removes st from the connection: released, or left to its
// worker (which drops the answer).
func (c *leanConn) forgetLocked(st *leanStream) {
	delete(c.streams, st.id)
	c.finishedLocked(st)
	c.flow.drop(st)
	if st.state == streamDeciding {
		st.state = streamOrphan
		c.orphans++
		return
	}
	c.giveBackLocked(st.held)
	c.l.release(st)
	c.doneLocked()
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
		c.doneLocked()
		c.flushLocked(false)
		return
	case c.closed:
		delete(c.streams, st.id)
		c.flow.drop(st)
		c.l.release(st)
		return
	case st.code != codes.OK:
		c.appendHeadersLocked(st.id, trailersOnly(200, st.code, st.msg), true)
		delete(c.streams, st.id)
		c.flow.drop(st)
		c.l.release(st)
		c.doneLocked()
	default:
		st.state = streamSending
		c.pushLocked(st)
	}
	c.flushLocked(false)
}
