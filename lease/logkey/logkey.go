// Package logkey is how a log line or an error message shows a counter
// key: by its rule name and a short hash of the rest, never the key itself.
// Keys are tenants' identities (API keys, user ids, tokens' subjects), and
// logs travel further than the data they describe.
//
// A counter key "per-key:k" shows as rule=per-key keyhash=<the first 16 hex
// digits of the SHA-256 of k>: an operator who knows a key finds its lines
// with
//
//	printf %s "$KEY" | sha256sum | cut -c1-16
//
// The hash hides a key that cannot be guessed (an API key); a key from a
// small set (an IP address) can be found by hashing every candidate.
//
// A library's message that may quote request bytes (an HTTP server's
// "malformed header" errors) is logged through Quoted.
//
// Everything here is safe for concurrent use.
package logkey

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
)

// Attr is the log attribute of counterKey ("rule:key"; a key without ':'
// has no rule): rule=… keyhash=…, computed only when the line is written.
// Use it in place of a "key", counterKey pair:
//
//	log.Warn("cannot return leased tokens", logkey.Attr(key), "err", err)
func Attr(counterKey string) slog.Attr {
	// An empty key makes handlers inline the group: rule=… keyhash=….
	return slog.Any("", key(counterKey))
}

// String is counterKey as an error message shows it: "rule=… keyhash=…".
func String(counterKey string) string {
	rule, h := split(counterKey)
	if rule == "" {
		return "keyhash=" + h
	}
	return "rule=" + rule + " keyhash=" + h
}

// Hash is the keyhash of a key (the part after the rule name).
func Hash(k string) string {
	sum := sha256.Sum256([]byte(k))
	return hex.EncodeToString(sum[:8])
}

type key string

// LogValue implements slog.LogValuer.
func (k key) LogValue() slog.Value {
	rule, h := split(string(k))
	if rule == "" {
		return slog.GroupValue(slog.String("keyhash", h))
	}
	return slog.GroupValue(slog.String("rule", rule), slog.String("keyhash", h))
}

func split(counterKey string) (rule, hash string) {
	rule, k, ok := strings.Cut(counterKey, ":")
	if !ok {
		return "", Hash(counterKey)
	}
	return rule, Hash(k)
}

// Quoted returns msg with every Go-quoted string in it ("...", as %q
// writes it) replaced by "…", except an IP address and port: request bytes
// a library quotes in an error (a header line, a method, a buffer) stay
// out of the log, the peer's address stays in.
func Quoted(msg string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(msg, '"')
		if i < 0 {
			break
		}
		q, err := strconv.QuotedPrefix(msg[i:])
		if err != nil {
			// Not a whole quoted string: hide the rest.
			b.WriteString(msg[:i])
			b.WriteString(`"…`)
			return b.String()
		}
		b.WriteString(msg[:i])
		if u, err := strconv.Unquote(q); err == nil {
			if _, err := netip.ParseAddrPort(u); err == nil {
				b.WriteString(q)
				msg = msg[i+len(q):]
				continue
			}
		}
		b.WriteString(`"…"`)
		msg = msg[i+len(q):]
	}
	b.WriteString(msg)
	return b.String()
}
