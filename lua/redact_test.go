package lua

import (
	"strings"
	"testing"
)

// TestRedactURL: every credential of every form is hidden, in RedactURL
// and in ParseURL's errors, while hosts, user names and db stay readable.
func TestRedactURL(t *testing.T) {
	const pw = "SuperSecretRedisPw"
	tests := []struct{ in, want string }{
		{"h:6379", "h:6379"},
		{"redis://default:" + pw + "@127.0.0.1:1", "redis://default:xxxxx@127.0.0.1:1"},
		{"redis://:" + pw + "@h1:1,h2:2/0", "redis://:xxxxx@h1:1,h2:2/0"},
		{"redis://u:p%40" + pw + "@h:99999", "redis://u:xxxxx@h:99999"},
		{"redis://u:" + pw + "@@h:1", "redis://u:xxxxx@h:1"},
		{"redis://h:1?username=bob&password=" + pw, "redis://h:1?username=bob&password=xxxxx"},
		{"redis://h:1?x=" + pw, "redis://h:1?x=xxxxx"},
		{"redis://h:1?password=a&" + pw, "redis://h:1?password=xxxxx&xxxxx"},
		{"redis://h:1?password=a&;" + pw, "redis://h:1?password=xxxxx&xxxxx"},
		{"sentinel://m@s1:1,s2:2/1?password=" + pw + "&sentinel_password=" + pw, "sentinel://m@s1:1,s2:2/1?password=xxxxx&sentinel_password=xxxxx"},
		{"sentinel://m:" + pw + "@s1:1", "sentinel://m:xxxxx@s1:1"},
		{"u:" + pw + "@h:1", "u:xxxxx@h:1"},
		{"redis://u:a?" + pw + "@h:1", "redis://xxxxx"},
		{"redis://h:1?password=a@" + pw, "redis://xxxxx"},
		{"u:" + pw + "@h://x", "xxxxx"},
	}
	for _, tt := range tests {
		if got := RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if _, err := ParseURL(tt.in); err != nil && strings.Contains(err.Error(), pw) {
			t.Errorf("ParseURL(%q) error shows the password: %v", tt.in, err)
		}
	}
	// Errors that used to quote the whole URL or a piece of a value.
	for _, in := range []string{
		"redis://default:" + pw + "@127.0.0.1:99999",
		"redis://default:" + pw + "@127.0.0.1:1?x=1",
		"redis://h:1?password=" + pw + "%zz",
		"redis://u:" + pw + "%zz@h:1",
		"sentinel://m:" + pw + "@s:1",
		"rediss://u:" + pw + "@h:1",
		"http://u:" + pw + "@h:1",
		"u:" + pw + "@h:1",
		"redis://u:" + pw + "@h1:1,h2:2/3",
		"redis://u:" + pw + "@h:1/x",
	} {
		_, err := ParseURL(in)
		if err == nil {
			t.Errorf("ParseURL(%q) accepted", in)
		} else if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), "zz") {
			t.Errorf("ParseURL(%q) error shows the password: %v", in, err)
		}
	}
}

func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{
		"redis://u:p@h:6379/2", "sentinel://m@s:26379?password=x&sentinel_password=y", "redis://h:1?username=a&password=b",
		"u:p@h", "redis://u:a?b@h", "redis://:p@h1:1,h2:2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseURL(s)
		r := RedactURL(s)
		if err != nil || strings.HasSuffix(r, "//"+redacted) || r == redacted {
			return // nothing parsed, or everything hidden
		}
		// What ParseURL reads from the redacted form is the same, except
		// that each credential is "xxxxx".
		rc, err := ParseURL(r)
		if err != nil {
			t.Fatalf("ParseURL(RedactURL(%q) = %q): %v", s, r, err)
		}
		for _, p := range []struct{ orig, got string }{{c.Password, rc.Password}, {c.SentinelPassword, rc.SentinelPassword}} {
			if p.orig != "" && p.got != redacted {
				t.Fatalf("RedactURL(%q) = %q keeps a credential (%q)", s, r, p.got)
			}
		}
		rc.Password, rc.SentinelPassword, c.Password, c.SentinelPassword = "", "", "", ""
		if !equalConfig(c, rc) {
			t.Fatalf("RedactURL(%q) = %q reads as %+v, want %+v", s, r, rc, c)
		}
	})
}
