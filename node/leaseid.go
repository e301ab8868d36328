package node

import (
	"encoding/base64"
	"strings"

	"github.com/sluicehq/sluice/node/api"
)

// maxKeyInLeaseID is the longest key that a lease_id carries: the longest
// whose lease_id still fits api.MaxLeaseIDLen with a 64-byte rule name and
// a 32-byte id.
const maxKeyInLeaseID = (api.MaxLeaseIDLen - api.MaxRuleNameLen - 2 - 32) / 4 * 3

// encodeLeaseID makes the lease_id answered by /v1/acquire:
// rule~base64url(key)~id. Rule names never contain '~' (their alphabet is
// [A-Za-z0-9_.-]) and base64url never does, so the id alone tells release
// which counter key to use. When the whole would exceed api.MaxLeaseIDLen
// (long keys), the key is left out, rule~~id, and the release request must
// carry "key".
func encodeLeaseID(rule, key, id string) string {
	encLen := base64.RawURLEncoding.EncodedLen(len(key))
	if len(rule)+2+encLen+len(id) > api.MaxLeaseIDLen {
		return rule + "~~" + id
	}
	var b strings.Builder
	b.Grow(len(rule) + 2 + encLen + len(id))
	b.WriteString(rule)
	b.WriteByte('~')
	b.WriteString(base64.RawURLEncoding.EncodeToString([]byte(key)))
	b.WriteByte('~')
	b.WriteString(id)
	return b.String()
}

// decodeLeaseID splits a lease_id made by encodeLeaseID; hasKey is false
// for the short form without the key. Errors name the field "lease_id".
func decodeLeaseID(s string) (rule, key string, hasKey bool, id string, err error) {
	bad := func(msg string) (string, string, bool, string, error) {
		return "", "", false, "", fieldError("lease_id", msg)
	}
	if s == "" {
		return bad("required")
	}
	if len(s) > api.MaxLeaseIDLen {
		return bad("too long")
	}
	rule, rest, ok1 := strings.Cut(s, "~")
	enc, id, ok2 := strings.Cut(rest, "~")
	if !ok1 || !ok2 || rule == "" || id == "" {
		return bad("malformed: want the lease_id answered by /v1/acquire")
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-' || c == '_') {
			return bad("malformed id")
		}
	}
	if enc == "" {
		return rule, "", false, id, nil
	}
	k, derr := base64.RawURLEncoding.DecodeString(enc)
	if derr != nil || len(k) == 0 || len(k) > api.MaxKeyLen {
		return bad("malformed key")
	}
	return rule, string(k), true, id, nil
}
