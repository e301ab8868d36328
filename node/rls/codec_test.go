package rls

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestCodecRoundTrip: what the codec encodes, the proto library decodes to
// the same message, and what the proto library encodes, the codec decodes
// (with the build tag vtprotobuf the responses take vtprotobuf's path, see
// TestCodecUsesVT; without it, the proto codec's).
func TestCodecRoundTrip(t *testing.T) {
	c := newCodec()
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			{Code: rlsv3.RateLimitResponse_OK},
			{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "per-user", RequestsPerUnit: 10, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE},
				LimitRemaining: 0, DurationUntilReset: durationpb.New(1500 * time.Millisecond)},
		},
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "RateLimit-Limit", Value: "10"}},
	}
	req := &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}, {Key: "path", Value: "/a|b"}}, HitsAddend: wrapperspb.UInt64(2)},
	}}
	for _, m := range []proto.Message{resp, req, &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}} {
		data, err := c.Marshal(m)
		if err != nil {
			t.Fatalf("Marshal(%T): %v", m, err)
		}
		got := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(data.Materialize(), got); err != nil {
			t.Fatalf("proto.Unmarshal(%T): %v", m, err)
		}
		if !proto.Equal(got, m) {
			t.Errorf("%T: codec encoded\n%v\ndecoded\n%v", m, m, got)
		}
		data.Free()

		raw, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		back := m.ProtoReflect().New().Interface()
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, back); err != nil {
			t.Fatalf("codec Unmarshal(%T): %v", m, err)
		}
		if !proto.Equal(back, m) {
			t.Errorf("%T: codec decoded\n%v\nwant\n%v", m, back, m)
		}
	}
	if _, err := c.Marshal("not a message"); err == nil {
		t.Error("Marshal(string): no error")
	}
}

// TestCodecReleasesReply: a pooled reply is encoded as its response, then
// back in its pool, reset; the next call's reply starts empty.
func TestCodecReleasesReply(t *testing.T) {
	s := &Server{}
	s.replies.New = func() any { return &reply{pool: &s.replies} }
	r := s.replies.Get().(*reply)
	r.start(2)
	l := r.limit(1)
	l.Name, l.RequestsPerUnit, l.Unit = "n", 5, rlsv3.RateLimitResponse_RateLimit_SECOND
	r.setReset(1, 250*time.Millisecond)
	r.resp.Statuses[1].LimitRemaining = 4
	want := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
		{Code: rlsv3.RateLimitResponse_OK},
		{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "n", RequestsPerUnit: 5, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
			LimitRemaining: 4, DurationUntilReset: durationpb.New(250 * time.Millisecond)},
	}}
	data, err := newCodec().Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	got := &rlsv3.RateLimitResponse{}
	if err := proto.Unmarshal(data.Materialize(), got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("encoded\n%v\nwant\n%v", got, want)
	}
	if len(r.resp.Statuses) != 0 || r.resp.OverallCode != 0 {
		t.Errorf("after Marshal the reply holds %v, want it reset", &r.resp)
	}
	// A reused reply of one status has no trace of the last call's.
	r.start(1)
	if !proto.Equal(&r.resp, &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK}}}) {
		t.Errorf("restarted reply: %v", &r.resp)
	}
	r.start(2)
	if s := r.resp.Statuses[1]; s.CurrentLimit != nil || s.DurationUntilReset != nil || s.LimitRemaining != 0 {
		t.Errorf("restarted reply's second status: %v", s)
	}
}
