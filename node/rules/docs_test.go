package rules_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/node/rls"
	"github.com/sluicehq/sluice/node/rules"
)

// snippet is a fenced ```yaml block of a Markdown file.
type snippet struct {
	where string // file:line of the opening fence
	body  []byte
}

// yamlSnippets returns the blocks fenced exactly ```yaml in file. A block
// fenced with more words (```yaml fragment) is YAML that is not a whole
// file Sluice reads, and is left out.
func yamlSnippets(t *testing.T, file string) []snippet {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []snippet
	var cur *snippet
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		l := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(l) == "```yaml":
			cur = &snippet{where: file + ":" + strconv.Itoa(line)}
		case cur != nil && strings.TrimSpace(l) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.body = append(append(cur.body, l...), '\n')
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Errorf("%s: a ```yaml block that never ends", cur.where)
	}
	return out
}

// topKey finds a top-level key of a YAML document.
func topKey(body []byte, key string) bool {
	return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `:`).Match(body)
}

// TestDocSnippets lints every YAML snippet of the README and docs/*.md:
// a block fenced ```yaml is a whole file Sluice reads, so a reader can
// copy it. One with a top-level rules: key is a rule file, parsed as
// sluice rules lint does (rules.Parse); one with a top-level domain: key
// is an envoyproxy/ratelimit configuration, parsed as sluiced
// -rls-config does (rls.Parse). Any other ```yaml block fails: make it a
// whole file, or fence YAML that is not one (a fragment, a Kubernetes
// manifest) as ```yaml fragment.
func TestDocSnippets(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"), filepath.Join(root, "deploy", "README.md"))
	seen := map[string]int{}
	for _, file := range files {
		for _, s := range yamlSnippets(t, file) {
			rel, _ := filepath.Rel(root, s.where)
			switch {
			case topKey(s.body, "rules"):
				seen["rules"]++
				if _, err := rules.Parse(s.body); err != nil {
					t.Errorf("%s: the rule file does not lint: %v\n%s", rel, err, s.body)
				}
			case topKey(s.body, "domain"):
				seen["rls"]++
				if _, err := rls.Parse(rls.Doc{Name: rel, Data: s.body}); err != nil {
					t.Errorf("%s: the envoyproxy/ratelimit configuration does not load: %v\n%s", rel, err, s.body)
				}
			default:
				t.Errorf("%s: a ```yaml block that is neither a rule file (a top-level rules: key) nor an envoyproxy/ratelimit "+
					"configuration (domain:): make it a whole file, or fence it ```yaml fragment\n%s", rel, s.body)
			}
		}
	}
	// The docs have both kinds: a test that finds none lints nothing.
	if seen["rules"] == 0 || seen["rls"] == 0 {
		t.Errorf("snippets found: %v; want rule files and RLS configurations (is the fence convention still ```yaml?)", seen)
	}
}

// TestDocsNameEveryAlgorithm: every algorithm of lease's table has its row
// in docs/rules.md's table of algorithms and a rule in
// deploy/rules.example.yaml (the last step of adding one: the lease
// package doc's "Adding an algorithm").
func TestDocsNameEveryAlgorithm(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "rules.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(doc), "\n## Algorithms\n")
	table, _, _ = strings.Cut(table, "\n## ")
	example, err := os.ReadFile(filepath.Join(root, "deploy", "rules.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range rules.Algorithms() {
		if !strings.Contains(table, "\n| `"+a.Name+"` |") {
			t.Errorf("docs/rules.md's table of algorithms has no row for %s", a.Name)
		}
		if !regexp.MustCompile(`(?m)^\s+algorithm: ` + regexp.QuoteMeta(a.Name) + `\s*(#.*)?$`).Match(example) {
			t.Errorf("deploy/rules.example.yaml has no rule of %s", a.Name)
		}
	}
}
