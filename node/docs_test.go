package node

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// packageDoc returns the package doc comment of the Go package in dir.
func packageDoc(t *testing.T, dir string) string {
	t.Helper()
	fset := token.NewFileSet()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil {
			return f.Doc.Text()
		}
	}
	t.Fatalf("no package doc in %s", dir)
	return ""
}

// TestDocsNameEveryEndpoint: the package doc names every path the node
// routes (the lease protocol's were left out), and node/api's names every
// endpoint whose JSON body it decodes.
func TestDocsNameEveryEndpoint(t *testing.T) {
	doc := strings.Join(strings.Fields(packageDoc(t, ".")), " ")
	for r, path := range routeNames {
		if r == routeOther {
			continue
		}
		if !strings.Contains(doc, strings.TrimSuffix(path, "/")) {
			t.Errorf("the node package doc (doc.go) does not name %s", path)
		}
	}
	apiDoc := strings.Join(strings.Fields(packageDoc(t, "api")), " ")
	for _, path := range []string{"/v1/check", "/v1/checks", "/v1/acquire", "/v1/release", "/v1/lease"} {
		if !strings.Contains(apiDoc, path) {
			t.Errorf("node/api's package doc does not name %s, whose body it decodes", path)
		}
	}
}

// TestReadmeLayoutNamesEveryPackage: the README's layout paragraph names
// every package under node/ and every module under contrib/.
func TestReadmeLayoutNamesEveryPackage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(b), "\nLayout: ")
	if !ok {
		t.Fatal("README.md has no paragraph starting with \"Layout: \"")
	}
	layout, _, _ = strings.Cut(layout, "\n\n")
	var want []string
	for _, parent := range []string{"node", "contrib"} {
		ents, err := os.ReadDir(filepath.Join("..", parent))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.IsDir() && e.Name() != "internal" && e.Name() != "testdata" {
				want = append(want, parent+"/"+e.Name())
			}
		}
	}
	for _, p := range want {
		if !strings.Contains(layout, "`"+p+"`") {
			t.Errorf("the README's layout paragraph does not name `%s`", p)
		}
	}
}
