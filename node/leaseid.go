package node

import (
	"encoding/base64"
	"strings"

	"github.com/sluicehq/sluice/node/api"
)

// maxIDInLeaseID is the longest Manager slot id a lease_id can carry with
// the longest rule name and key (whose unpadded base64url takes
// ceil(8n/6) bytes): api.MaxLeaseIDLen leaves room for it.
const maxIDInLeaseID = api.MaxLeaseIDLen - api.MaxRuleNameLen - 2 - (api.MaxKeyLen*8+5)/6

// encodeLeaseID makes the lease_id answered by /v1/acquire:
// rule~base64url(key)~id. Rule names never contain '~' (their alphabet is
// [A-Za-z0-9_.-]) and base64url never does, so the lease_id alone tells
// release which counter key to use. Every valid rule and key fit
// (api.MaxLeaseIDLen is sized for them); ok is false only for an id longer
// than maxIDInLeaseID, which the Manager never makes.
func encodeLeaseID(rule, key, id string) (string, bool) {
	encLen := base64.RawURLEncoding.EncodedLen(len(key))
	if len(rule)+2+encLen+len(id) > api.MaxLeaseIDLen {
		return "", false
	}
	var b strings.Builder
	b.Grow(len(rule) + 2 + encLen + len(id))
	b.WriteString(rule)
	b.WriteByte('~')
	b.WriteString(base64.RawURLEncoding.EncodeToString([]byte(key)))
	b.WriteByte('~')
	b.WriteString(id)
	return b.String(), true
}

// decodeLeaseID splits a lease_id made by encodeLeaseID. Errors name the
// field "lease_id".
func decodeLeaseID(s string) (rule, key, id string, err error) {
	bad := func(msg string) (string, string, string, error) {
		return "", "", "", fieldError("lease_id", msg)
	}
	if s == "" {
		return bad("required")
	}
	if len(s) > api.MaxLeaseIDLen {
		return bad("too long")
	}
	rule, rest, ok1 := strings.Cut(s, "~")
	enc, id, ok2 := strings.Cut(rest, "~")
	if !ok1 || !ok2 || !api.ValidName(rule) || enc == "" || id == "" {
		return bad("malformed: want the lease_id answered by /v1/acquire")
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-' || c == '_') {
			return bad("malformed id")
		}
	}
	k, derr := base64.RawURLEncoding.DecodeString(enc)
	if derr != nil || !api.ValidKey(string(k)) {
		return bad("malformed key")
	}
	return rule, string(k), id, nil
}
