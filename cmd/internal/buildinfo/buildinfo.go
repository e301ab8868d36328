// Package buildinfo says which build of Sluice a binary is: the module
// version and the VCS revision the Go toolchain stamped into it
// (runtime/debug.ReadBuildInfo). sluice version, sluiced -version and
// sluice-bench version print it (each also as -version and --version).
package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Info describes a build. A field the build does not carry is empty
// (Version is "(devel)" for a binary built from a checkout without a
// version tag by an older toolchain, Revision empty with -buildvcs=false or
// outside a repository).
type Info struct {
	Program  string `json:"program"`
	Version  string `json:"version"`            // module version, e.g. v0.4.0 or v0.0.0-20261126…-1a2b3c4d5e6f+dirty
	Revision string `json:"revision,omitempty"` // VCS revision (commit)
	Time     string `json:"time,omitempty"`     // commit time, RFC 3339
	Modified bool   `json:"modified,omitempty"` // the work tree had changes
	Go       string `json:"go,omitempty"`       // toolchain, e.g. go1.26.8
	Platform string `json:"platform,omitempty"` // GOOS/GOARCH
}

// Get returns the running binary's Info, named program.
func Get(program string) Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Program: program}
	}
	return FromBuildInfo(program, bi)
}

// FromBuildInfo returns the Info in bi, named program.
func FromBuildInfo(program string, bi *debug.BuildInfo) Info {
	in := Info{Program: program, Version: bi.Main.Version, Go: bi.GoVersion}
	var goos, goarch string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	if goos != "" && goarch != "" {
		in.Platform = goos + "/" + goarch
	}
	return in
}

// String is one line such as
//
//	sluice v0.4.0 (revision 1a2b3c4d5e6f, 2026-11-26T22:00:00Z) go1.26.8 linux/amd64
//
// saying "unknown version" or "no VCS revision" for what the build lacks.
func (in Info) String() string {
	var b strings.Builder
	v := in.Version
	if v == "" {
		v = "unknown version (no build information)"
	}
	fmt.Fprintf(&b, "%s %s", in.Program, v)
	switch {
	case in.Revision != "":
		rev := in.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		b.WriteString(" (revision " + rev)
		if in.Modified {
			b.WriteString(", modified")
		}
		if in.Time != "" {
			b.WriteString(", " + in.Time)
		}
		b.WriteString(")")
	case in.Version != "":
		b.WriteString(" (no VCS revision)")
	}
	for _, s := range []string{in.Go, in.Platform} {
		if s != "" {
			b.WriteString(" " + s)
		}
	}
	return b.String()
}
