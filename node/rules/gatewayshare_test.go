package rules

import (
	"errors"
	"testing"
)

func TestGatewayShare(t *testing.T) {
	const head = "rules:\n  - name: r\n    algorithm: token_bucket\n    limit: 100\n    period: 1m\n"
	s, err := Parse([]byte(head))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Get("r").GatewayShare; got != DefaultGatewayShare {
		t.Fatalf("default share %v, want %v", got, DefaultGatewayShare)
	}
	s, err = Parse([]byte(head + "    gateway_share: 0.5\n"))
	if err != nil || s.Get("r").GatewayShare != 0.5 {
		t.Fatalf("gateway_share 0.5: %v", err)
	}
	for _, bad := range []string{"1.5", "-0.1", ".nan", "x", "[1]"} {
		_, err := Parse([]byte(head + "    gateway_share: " + bad + "\n"))
		var e *Error
		if !errors.As(err, &e) || e.Field != "gateway_share" {
			t.Errorf("gateway_share %s: %v, want an error naming gateway_share", bad, err)
		}
	}
}
