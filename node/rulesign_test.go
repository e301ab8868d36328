package node

import (
	"bytes"
	"errors"
	"testing"
)

// TestRulesSigner: a stored set's signature holds for its version and
// specs, in order, under the cluster key it was made with, and for
// nothing else.
func TestRulesSigner(t *testing.T) {
	key := []byte("0123456789abcdef")
	s := newRulesSigner(key)
	if newRulesSigner(nil) != nil {
		t.Fatal("a signer without a cluster key")
	}
	if bytes.Equal(s.key, key) {
		t.Fatal("the rules key is the cluster key itself")
	}
	specs := [][]byte{[]byte(`{"name":"a"}`), []byte(`{"name":"b"}`)}
	sig := s.sign(7, specs)
	if err := s.verify(7, specs, sig); err != nil {
		t.Fatalf("verify of its own signature: %v", err)
	}
	other := newRulesSigner([]byte("fedcba9876543210"))
	for _, c := range []struct {
		name  string
		s     *rulesSigner
		v     uint64
		specs [][]byte
		sig   []byte
		want  error
	}{
		{"another cluster key", other, 7, specs, sig, errRulesBadSignature},
		{"a rule changed", s, 7, [][]byte{[]byte(`{"name":"a","limit":9}`), specs[1]}, sig, errRulesBadSignature},
		{"rules reordered", s, 7, [][]byte{specs[1], specs[0]}, sig, errRulesBadSignature},
		{"a rule added", s, 7, append(append([][]byte(nil), specs...), []byte(`{"name":"c"}`)), sig, errRulesBadSignature},
		{"two rules joined", s, 7, [][]byte{append(append([]byte(nil), specs[0]...), specs[1]...)}, sig, errRulesBadSignature},
		{"version moved", s, 8, specs, sig, errRulesUnsigned},
		{"signature's version moved", s, 8, specs, append([]byte("v1.8."), sig[len("v1.7."):]...), errRulesBadSignature},
		{"none", s, 7, specs, nil, errRulesUnsigned},
		{"malformed", s, 7, specs, []byte("v1.7.zz"), errRulesBadSignature},
		{"other scheme", s, 7, specs, []byte("v2.7.00"), errRulesBadSignature},
		{"truncated", s, 7, specs, sig[:len(sig)-2], errRulesBadSignature},
	} {
		if err := c.s.verify(c.v, c.specs, c.sig); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}
