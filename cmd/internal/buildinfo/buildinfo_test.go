package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	full := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/sluicehq/sluice", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "1a2b3c4d5e6f7a8b9c0d"}, {Key: "vcs.time", Value: "2026-11-26T22:00:00Z"},
			{Key: "vcs.modified", Value: "true"}, {Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"}}}
	noVCS := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}
	for _, tc := range []struct {
		in   Info
		want string
	}{
		{FromBuildInfo("sluice", full), "sluice v0.4.0 (revision 1a2b3c4d5e6f, modified, 2026-11-26T22:00:00Z) go1.26.8 linux/amd64"},
		{FromBuildInfo("sluiced", noVCS), "sluiced (devel) (no VCS revision) go1.26.8"},
		{Info{Program: "sluice"}, "sluice unknown version (no build information)"},
	} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
	}
}

// TestGet: a test binary carries build information (its module version
// is "(devel)" or empty, but the Go version is always there).
func TestGet(t *testing.T) {
	in := Get("x")
	if in.Program != "x" || !strings.HasPrefix(in.Go, "go") {
		t.Errorf("Get = %+v", in)
	}
}
