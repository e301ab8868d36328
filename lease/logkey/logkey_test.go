package logkey_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/lease/logkey"
)

// TestAttr: text and JSON lines carry the rule and the key's hash, never
// the key; the hash is the documented one.
func TestAttr(t *testing.T) {
	const secret = "sk_live_SECRET-API-KEY"
	var text, js bytes.Buffer
	for _, l := range []*slog.Logger{
		slog.New(slog.NewTextHandler(&text, nil)),
		slog.New(slog.NewJSONHandler(&js, nil)),
	} {
		l.Warn("cannot charge", logkey.Attr("per-key:"+secret), "err", errors.New("x"))
		l.Warn("no rule", logkey.Attr(secret))
	}
	h := logkey.Hash(secret)
	if h != "a436d7e329703dd3" { // printf %s "$KEY" | sha256sum | cut -c1-16
		t.Fatalf("Hash = %q", h)
	}
	if !strings.Contains(text.String(), "rule=per-key keyhash="+h+" err=x") || !strings.Contains(text.String(), `msg="no rule" keyhash=`+h) {
		t.Errorf("text: %s", text.String())
	}
	var line map[string]any
	if err := json.Unmarshal(bytes.SplitN(js.Bytes(), []byte("\n"), 2)[0], &line); err != nil || line["rule"] != "per-key" || line["keyhash"] != h {
		t.Errorf("json: %s (%v)", js.String(), err)
	}
	for _, out := range []string{text.String(), js.String(), logkey.String("per-key:" + secret)} {
		if strings.Contains(out, "SECRET") {
			t.Errorf("the key shows: %s", out)
		}
	}
	if got := logkey.String("per-key:" + secret); got != "rule=per-key keyhash="+h {
		t.Errorf("String = %q", got)
	}
}

// TestQuoted: quoted request bytes are hidden, peer addresses kept.
func TestQuoted(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`error when serving connection "192.0.2.1:80"<->"[::1]:5000": missing colon: "Authorization Bearer SECRET": buffer size=7`,
			`error when serving connection "192.0.2.1:80"<->"[::1]:5000": missing colon: "…": buffer size=7`},
		{`contents: "GET / HTTP/1.1\r\nX-Api-Key: SECRET"..."SECRET\r\n"`, `contents: "…"..."…"`},
		{`unsupported method "BAD\x00" in "BAD\x00 /x`, `unsupported method "…" in "…`},
		{`no quotes`, `no quotes`},
	} {
		if got := logkey.Quoted(tt.in); got != tt.want {
			t.Errorf("Quoted(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
