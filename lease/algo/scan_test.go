package algo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// algorithmConstants is the names of the Algorithm constants, read from
// table.go's declaration (so that a new algorithm's is covered at once).
func algorithmConstants(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "table.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		in := false // in the block of the Algorithm constants
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); ok {
				in = id.Name == "Algorithm"
			}
			if in && (vs.Type != nil || len(vs.Values) == 0) { // the typed one and iota's followers
				for _, n := range vs.Names {
					names[n.Name] = true
				}
			}
		}
	}
	if len(names) != len(Algorithms()) {
		t.Fatalf("read %d Algorithm constants from table.go (%v), want %d", len(names), names, len(Algorithms()))
	}
	return names
}

// TestNoAlgorithmNamedOutsideTheTable scans every Go file of the
// repository but tests for a branch on a named algorithm: a comparison
// (== or !=) with one of the Algorithm constants, or a case that lists
// one, whether through package lease (which re-exports them) or this one.
// What sets an algorithm apart is a trait of its row (Leased, Refills,
// LeasesAhead, WindowReset, ...) or its code, so that a new algorithm is
// one file, its scripts and one row. Constructing a policy of a named
// algorithm (a default, a probe) and indexing a table by one (lua's row
// of scripts) are not branches. lease/storetest and lease/modeltest are
// tests (their cases are per algorithm) and are not scanned.
func TestNoAlgorithmNamedOutsideTheTable(t *testing.T) {
	consts := algorithmConstants(t)
	root := filepath.Join("..", "..")
	skip := map[string]bool{"testdata": true, "node_modules": true, "vendor": true,
		filepath.Join("lease", "storetest"): true, filepath.Join("lease", "modeltest"): true}
	files, found := 0, 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || skip[d.Name()] || skip[rel] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files++
		// The names this file gives lease and this package, and whether
		// it is one of them (its constants unqualified).
		pkgs := map[string]bool{}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if !strings.HasSuffix(p, "sluice/lease") && !strings.HasSuffix(p, "sluice/lease/algo") {
				continue
			}
			name := p[strings.LastIndexByte(p, '/')+1:]
			if im.Name != nil {
				name = im.Name.Name
			}
			pkgs[name] = true
		}
		own := f.Name.Name == "algo" && filepath.Dir(rel) == filepath.Join("lease", "algo") ||
			f.Name.Name == "lease" && filepath.Dir(rel) == "lease"
		named := func(e ast.Expr) bool {
			switch e := ast.Unparen(e).(type) {
			case *ast.Ident:
				return own && consts[e.Name]
			case *ast.SelectorExpr:
				x, ok := e.X.(*ast.Ident)
				return ok && pkgs[x.Name] && consts[e.Sel.Name]
			}
			return false
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if (n.Op == token.EQL || n.Op == token.NEQ) && (named(n.X) || named(n.Y)) {
					found++
					t.Errorf("%s: compares with a named algorithm: make it a trait of the algorithm table's row (lease/algo/table.go)", fset.Position(n.Pos()))
				}
			case *ast.CaseClause:
				for _, e := range n.List {
					if named(e) {
						found++
						t.Errorf("%s: a case of a named algorithm: make it a trait of the algorithm table's row (lease/algo/table.go)", fset.Position(e.Pos()))
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 200 {
		t.Fatalf("scanned %d Go files from %s: not the repository", files, root)
	}
	t.Logf("%d Go files scanned, %d branches on a named algorithm", files, found)
}
