package rules

import (
	"bytes"
	"testing"

	"github.com/valyala/fasthttp"
)

var urlSeeds = []string{
	"", "/", "a", "/api/", "//api//x", "/%61pi/", "/a/./b", "/a/../b", "/a/b/..", "/..", "/../x", "/a/%2e%2e/b",
	"/a%2fb", "/%zz/%4", "/%", "/a+b", "/./", "/a/.", "/.../x", "///", "/a/b/../../..", "/a//../b",
}

// checkURL compares appendNormalPath and queryArg with fasthttp's URI.Path
// and Args.Peek on s (a path, and a query string).
func checkURL(t *testing.T, s string) {
	var u fasthttp.URI
	u.SetPath(s)
	if got := appendNormalPath([]byte("x"), []byte(s)); string(got[1:]) != string(u.Path()) || got[0] != 'x' {
		t.Errorf("path %q: %q, fasthttp %q", s, got[1:], u.Path())
	}
	var a fasthttp.Args
	a.Parse(s)
	for _, name := range []string{"a", "b", "a b", "%", "k"} {
		want := a.Peek(name)
		_, got := queryArg(nil, []byte(s), name)
		if !bytes.Equal(got, want) {
			t.Errorf("query %q arg %q: %q, fasthttp %q", s, name, got, want)
		}
	}
}

// TestURLAsFasthttp: request paths and query arguments are read as
// fasthttp reads them (the gateway's server), without linking it.
func TestURLAsFasthttp(t *testing.T) {
	for _, s := range append(urlSeeds, "a=1&b=2", "a=1&a=2", "b=%41+x&a", "a+b=c", "&&a=&a=3", "k=%zz%4", "=x&k=v", "a%3d1=2") {
		checkURL(t, s)
	}
}

func FuzzURLAsFasthttp(f *testing.F) {
	for _, s := range urlSeeds {
		f.Add(s)
	}
	f.Add("a=1&b=%41+x")
	f.Fuzz(checkURL)
}
