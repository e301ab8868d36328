//go:build vtprotobuf

package rls

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
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
