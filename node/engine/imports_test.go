package engine_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImports: the engine and the gRPC front end link no HTTP server:
// neither imports fasthttp, even indirectly, nor the node package (the
// HTTP front end); the engine imports no wire codec (node/api's JSON,
// node/forward's) itself.
func TestImports(t *testing.T) {
	list := func(args ...string) []string {
		out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		return strings.Fields(string(out))
	}
	const mod = "github.com/sluicehq/sluice/"
	for _, pkg := range []string{mod + "node/engine", mod + "node/rls"} {
		for _, dep := range list("-deps", pkg) {
			if strings.HasPrefix(dep, "github.com/valyala/fasthttp") || dep == mod+"node" {
				t.Errorf("%s imports %s", pkg, dep)
			}
		}
	}
	direct := list("-f", `{{join .Imports " "}}`, mod+"node/engine")
	for _, bad := range []string{mod + "node/api", mod + "node/forward"} {
		if slices.Contains(direct, bad) {
			t.Errorf("node/engine imports %s", bad)
		}
	}
}
