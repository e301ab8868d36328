package rls

import (
	"context"
	"slices"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// codec is the server's gRPC codec. Messages with go-control-plane's
// vtprotobuf-generated marshalling (compiled in with the build tag
// vtprotobuf, as `make build` and deploy/Dockerfile build) are encoded by
// it, without reflection, into buffers of pool; every other message goes
// through gRPC's proto codec. A *reply is encoded as its response and then
// returned to its pool; a *request (the generated code has no
// unmarshalling) is decoded by request.decode.
type codec struct {
	proto encoding.CodecV2
	pool  mem.BufferPool
}

func newCodec() codec {
	return codec{proto: encoding.GetCodecV2("proto"), pool: mem.DefaultBufferPool()}
}

// minPooledCap is the least capacity asked of the pool for an encoded
// message. gRPC returns a buffer to its pool once sent only when its
// capacity is past mem.IsBelowBufferPoolingThreshold (1 KiB); below, it
// holds the bytes as an unpooled mem.SliceBuffer, which costs an
// allocation for the bytes and one for the interface. A response is a few
// dozen bytes, so it is written at the start of a 4 KiB buffer (a size
// class of gRPC's default pool), which goes back to the pool.
const minPooledCap = 4 << 10

// vtMarshaler is what vtprotobuf generates for a message.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict(dAtA []byte) (int, error)
}

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*reply); ok {
		defer r.release()
		v = &r.resp
	}
	m, ok := v.(vtMarshaler)
	if !ok {
		return c.proto.Marshal(v)
	}
	size := m.SizeVT()
	buf := c.pool.Get(max(size, minPooledCap))
	*buf = (*buf)[:size]
	if _, err := m.MarshalToSizedBufferVTStrict(*buf); err != nil {
		c.pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}

// Unmarshal decodes a *request with request.decode, or with the proto
// library when that declines; every other message with the proto codec.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*request)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(c.pool)
	defer buf.Free()
	return r.unmarshal(buf.ReadOnlyData())
}

// Name is the proto codec's: requests come as application/grpc(+proto).
func (c codec) Name() string { return c.proto.Name() }

// reply is a response and the messages it points to, reused through a
// pool: the gRPC handler returns a *reply, which the codec encodes and
// releases once sent. Nothing else holds it after the codec (the server
// has no interceptors or stats handlers; gRPC's binary log, when turned on
// by its environment variable, logs no payload of a reply).
type reply struct {
	resp     rlsv3.RateLimitResponse
	statuses []*rlsv3.RateLimitResponse_DescriptorStatus // resp.Statuses' array
	msgs     []*statusMsgs
	pool     *sync.Pool // nil: not pooled
}

// statusMsgs are the messages of one descriptor's status.
type statusMsgs struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// start resets r for a response of n statuses, each OK and empty, and OK
// overall.
func (r *reply) start(n int) {
	r.resp.Reset()
	r.resp.OverallCode = rlsv3.RateLimitResponse_OK
	for len(r.msgs) < n {
		r.msgs = append(r.msgs, &statusMsgs{})
	}
	r.statuses = r.statuses[:0]
	for _, m := range r.msgs[:n] {
		m.status.Reset()
		m.status.Code = rlsv3.RateLimitResponse_OK
		r.statuses = append(r.statuses, &m.status)
	}
	r.resp.Statuses = r.statuses
}

// limit returns status i's current_limit, set on it.
func (r *reply) limit(i int) *rlsv3.RateLimitResponse_RateLimit {
	m := r.msgs[i]
	m.limit.Reset()
	m.status.CurrentLimit = &m.limit
	return &m.limit
}

// setReset sets status i's duration_until_reset to d (as durationpb.New).
func (r *reply) setReset(i int, d time.Duration) {
	m := r.msgs[i]
	m.reset.Reset()
	m.reset.Seconds = int64(d / time.Second)
	m.reset.Nanos = int32(d % time.Second)
	m.status.DurationUntilReset = &m.reset
}

// release returns r to its pool, if it has one.
func (r *reply) release() {
	if r.pool == nil {
		return
	}
	r.resp.Reset()
	clear(r.statuses)
	r.pool.Put(r)
}

// serviceDesc is go-control-plane's RateLimitService with a handler that
// decodes into a pooled *request and answers with a pooled *reply.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: rlsv3.RateLimitService_ServiceDesc.ServiceName,
	HandlerType: (*rlsv3.RateLimitServiceServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "ShouldRateLimit",
		Handler:    shouldRateLimitHandler,
	}},
	Metadata: rlsv3.RateLimitService_ServiceDesc.Metadata,
}

func shouldRateLimitHandler(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	// The server installs no interceptors.
	s := srv.(*Server)
	r := s.requests.Get().(*request)
	defer s.requests.Put(r) // the reply holds nothing of it
	if err := dec(r); err != nil {
		return nil, err
	}
	return s.shouldRateLimitPooled(ctx, &r.req)
}

// appendMarshal appends m's encoding to dst: with its vtprotobuf-generated
// marshalling when it has one (see codec), else with the proto library.
func appendMarshal(dst []byte, m proto.Message) ([]byte, error) {
	vt, ok := m.(vtMarshaler)
	if !ok {
		return proto.MarshalOptions{}.MarshalAppend(dst, m)
	}
	n, size := len(dst), vt.SizeVT()
	dst = slices.Grow(dst, size)[:n+size]
	if _, err := vt.MarshalToSizedBufferVTStrict(dst[n:]); err != nil {
		return dst[:n], err
	}
	return dst, nil
}
