package rls

import (
	"bytes"
	"encoding/binary"
	"strconv"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TransportLean's calls: which method a stream calls, the workers that run
// calls, and the encoding of their answers.

// leanMethod is the method a stream calls.
type leanMethod uint8

const (
	methodRLS leanMethod = iota + 1
	methodHealth
)

// The paths of the methods TransportLean serves.
const (
	pathShouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	pathHealthCheck     = "/grpc.health.v1.Health/Check"
)

// The header blocks of every answer, encoded once: HPACK literals "never
// indexed" (hpack.Encoder writes a Sensitive field so), which leave the
// peer's dynamic table alone, so that one block is valid on every
// connection.
var (
	leanResponseHeaders = hpackBlock(":status", "200", "content-type", "application/grpc")
	leanTrailersOK      = hpackBlock("grpc-status", "0")
)

// hpackBlock encodes name, value pairs as never-indexed literals.
func hpackBlock(kv ...string) []byte {
	var b bytes.Buffer
	e := hpack.NewEncoder(&b)
	for i := 0; i+1 < len(kv); i += 2 {
		e.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1], Sensitive: true}) // writes to a bytes.Buffer: no error
	}
	return b.Bytes()
}

// maxStatusMessage bounds grpc-message, percent-encoded, so that an error
// answer's header block fits a frame.
const maxStatusMessage = 4096

// trailersOnly is the header block of an error answer (gRPC's
// "Trailers-Only" response): HTTP status, content-type, grpc-status and
// grpc-message.
func trailersOnly(httpStatus int, code codes.Code, msg string) []byte {
	m := percentEncode(msg)
	if len(m) > maxStatusMessage {
		m = m[:maxStatusMessage]
		for i := len(m) - 1; i >= len(m)-2 && i >= 0; i-- { // not in the middle of a %XX
			if m[i] == '%' {
				m = m[:i]
			}
		}
	}
	return hpackBlock(":status", strconv.Itoa(httpStatus), "content-type", "application/grpc",
		"grpc-status", strconv.Itoa(int(code)), "grpc-message", m)
}

// percentEncode encodes msg as grpc-message is: every byte outside
// printable ASCII, and '%', as %XX.
func percentEncode(msg string) string {
	const hex = "0123456789ABCDEF"
	var b []byte
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c >= ' ' && c <= '~' && c != '%' {
			if b != nil {
				b = append(b, c)
			}
			continue
		}
		if b == nil {
			b = append(make([]byte, 0, len(msg)+16), msg[:i]...)
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	if b == nil {
		return msg
	}
	return string(b)
}

// dispatch hands st's call to an idle worker, or to a new long-lived one
// while there are fewer than streamWorkers, or else to a goroutine of its
// own: a call may block (a Store's first touch, a forward to the key's
// owner), so none runs on the connection's reader.
func (l *leanServer) dispatch(st *leanStream) {
	select {
	case l.work <- st:
		return
	default:
	}
	l.mu.Lock()
	long := l.nwork < streamWorkers
	if long {
		l.nwork++
		l.workers.Add(1)
	}
	l.mu.Unlock()
	if long {
		go l.worker(st)
		return
	}
	go l.call(st)
}

// worker runs calls until the server stops. Its stack stays grown: a
// goroutine per call grew one on every call.
func (l *leanServer) worker(st *leanStream) {
	defer l.workers.Done()
	for {
		l.call(st)
		select {
		case st = <-l.work:
		case <-l.quit:
			return
		}
	}
}

// call runs st's call and sends its answer.
func (l *leanServer) call(st *leanStream) {
	c := st.c
	msg := st.in[5:]
	var err error
	switch st.method {
	case methodRLS:
		err = l.shouldRateLimit(st, msg)
	case methodHealth:
		err = l.healthCheck(st, msg)
	}
	if err != nil {
		s := status.Convert(err)
		st.code, st.msg = s.Code(), s.Message()
	}
	c.finish(st)
}

func (l *leanServer) shouldRateLimit(st *leanStream, msg []byte) error {
	s := l.s
	r := s.requests.Get().(*request)
	defer s.requests.Put(r) // the reply holds nothing of it
	if err := r.unmarshal(msg); err != nil {
		return status.Error(codes.Internal, "grpc: error unmarshalling request: "+err.Error())
	}
	rep, err := s.shouldRateLimitPooled(st.c.ctx, &r.req)
	if err != nil {
		return err
	}
	defer rep.release()
	return st.setMessage(&rep.resp)
}

// healthCheck answers as grpc-go's health server does: it asks it.
func (l *leanServer) healthCheck(st *leanStream, msg []byte) error {
	var req healthpb.HealthCheckRequest
	if err := proto.Unmarshal(msg, &req); err != nil {
		return status.Error(codes.Internal, "grpc: error unmarshalling request: "+err.Error())
	}
	resp, err := l.s.health.Check(st.c.ctx, &req)
	if err != nil {
		return err
	}
	return st.setMessage(resp)
}

// setMessage sets st's response to m, with gRPC's message prefix.
func (st *leanStream) setMessage(m proto.Message) error {
	out, err := appendMarshal(append(st.out[:0], 0, 0, 0, 0, 0), m)
	if err != nil {
		return status.Error(codes.Internal, "grpc: error while marshaling: "+err.Error())
	}
	binary.BigEndian.PutUint32(out[1:5], uint32(len(out)-5))
	st.out = out
	return nil
}

// release returns st to the pool.
func (l *leanServer) release(st *leanStream) {
	in, out := st.in[:0], st.out[:0]
	if cap(in) > leanMaxInBuffer {
		in = nil
	}
	if cap(out) > leanMaxBuffer {
		out = nil
	}
	*st = leanStream{in: in, out: out}
	l.streams.Put(st)
}
