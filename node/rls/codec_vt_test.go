//go:build vtprotobuf

package rls

import (
	"bytes"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// TestCodecUsesVT: built with the tag vtprotobuf, responses have
// go-control-plane's generated marshalling, which the codec uses; the
// health service's messages have none and take the proto codec's path.
func TestCodecUsesVT(t *testing.T) {
	if _, ok := any(&rlsv3.RateLimitResponse{}).(vtMarshaler); !ok {
		t.Error("RateLimitResponse has no vtprotobuf marshalling with the tag vtprotobuf")
	}
	if _, ok := any(&healthpb.HealthCheckResponse{}).(vtMarshaler); ok {
		t.Error("HealthCheckResponse has vtprotobuf marshalling: the fallback is not exercised")
	}
}

// countingPool is a mem.BufferPool that counts the buffers out of it.
type countingPool struct {
	mem.BufferPool
	out int
}

func (p *countingPool) Get(n int) *[]byte { p.out++; return p.BufferPool.Get(n) }
func (p *countingPool) Put(b *[]byte)     { p.out--; p.BufferPool.Put(b) }

// TestCodecPoolsSmallResponses: a response of a few dozen bytes is encoded
// into a buffer of the codec's pool, which goes back to it once gRPC frees
// the encoded message (rather than bytes allocated for each call, which
// gRPC does not pool below 1 KiB).
func TestCodecPoolsSmallResponses(t *testing.T) {
	pool := &countingPool{BufferPool: mem.DefaultBufferPool()}
	c := newCodec()
	c.pool = pool
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 7}}}
	data, err := c.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	want, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	if got := data.Materialize(); !bytes.Equal(got, want) {
		t.Errorf("encoded %x, want %x", got, want)
	}
	if pool.out != 1 {
		t.Fatalf("%d buffers out of the pool while the message is held, want 1", pool.out)
	}
	data.Free()
	if pool.out != 0 {
		t.Errorf("%d buffers out of the pool after Free, want 0", pool.out)
	}
}
