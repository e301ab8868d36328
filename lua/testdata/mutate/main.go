// Command mutate is the Lua scripts' mutation harness (make mutate-lua):
// it proves that the parity tests (TestGoLuaParity, TestFastPathMatchesGeneral,
// FuzzGoLuaParity's seeds) fail when one line of one algorithm's script
// changes. It builds the lua package's test binary once, then for each
// single-line mutant of the scripts writes the scripts to a directory with
// that one line changed, runs the parity tests on them (the test-only hook
// SLUICE_LUA_SCRIPTS, lua/scriptdir_test.go) and records whether they
// failed (killed) or passed (survived). Run from the repository root:
//
//	go run ./lua/testdata/mutate [-max N] [-seed S] [-timeout D] [-j N] [-files a.lua,b.lua] [-only file:line] [-rerun out.txt] [-list]
//
// -rerun tests only the mutants an earlier run's output lists as
// survivors (matched by file and mutated line, so edits elsewhere in the
// file do not lose them). An interrupt (^C) stops the run, kills the
// tests running and reports the mutants tested so far.
//
// The mutants of a code line (comments and string literals are never
// touched), one change each:
//
//	rel   a comparison: < ↔ <=, > ↔ >=, == ↔ ~=
//	arith + ↔ - (binary minus only)
//	num   an integer literal n → n+1
//	cond  drop one operand of a top-level and/or in an if, elseif, while
//	      or until condition
//	del   delete a statement line: an assignment or call with no
//	      declaration (not local, return, break, nor a line of a block's
//	      structure: if, for, while, repeat, until, else, end), whole on
//	      its line
//
// A mutant the tests cannot tell from the original, because no input can
// change behaviour, is listed in equivalent (below) with the reason; the
// harness reports it apart from the survivors, which are gaps in the
// tests. Every run prints a table per file and each survivor.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// files are the scripts mutated: every algorithm's, and the shared
// leased.lua and prelude.lua.
var files = []string{
	"token_bucket_lease.lua", "token_bucket_return.lua",
	"gcra_lease.lua", "gcra_return.lua",
	"fixed_window_lease.lua", "fixed_window_return.lua",
	"sliding_window_lease.lua", "sliding_window_return.lua",
	"sliding_log.lua", "concurrency_acquire.lua", "concurrency_release.lua",
	"leased.lua", "prelude.lua",
}

// equivalent are the mutants no input can tell from the original, by
// file, the line and the mutated line (trimmed: mutant.key), with the
// reason.
var equivalent = map[string]string{}

// mutant is one changed line.
type mutant struct {
	file string
	line int    // 1-based
	op   string // rel, arith, num, cond, del
	from string // the line as it was
	to   string // the line as mutated
}

func (m mutant) key() string {
	return m.file + "|" + strings.TrimSpace(m.from) + "|" + strings.TrimSpace(m.to)
}

// result is what the tests said of a mutant.
type result struct {
	m       mutant
	killed  bool
	how     string // failed, script error, timeout
	elapsed time.Duration
}

func main() {
	max := flag.Int("max", 0, "at most this many mutants per file, sampled evenly with -seed (0: all)")
	seed := flag.Uint64("seed", 1, "the sample's seed")
	timeout := flag.Duration("timeout", 3*time.Minute, "a mutant's test run is killed (and the mutant counted killed) after this")
	jobs := flag.Int("j", 1, "mutants tested at once")
	only := flag.String("only", "", "test only the mutants of file:line (comma-separated)")
	fileList := flag.String("files", "", "mutate only these files (comma-separated)")
	list := flag.Bool("list", false, "print the mutants and exit")
	rerun := flag.String("rerun", "", "test only the survivors listed in this earlier run's output")
	run := flag.String("run", "^(TestGoLuaParity|TestGoLuaParityEdges|TestReleaseAtItsExpiry|TestFastPathMatchesGeneral|TestPreviousReleaseSameKeys|FuzzGoLuaParity)$", "the tests run on each mutant")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var again map[string]bool
	if *rerun != "" {
		again = survivorsIn(*rerun)
	}
	root, err := os.Getwd()
	check(err)
	luaDir := filepath.Join(root, "lua")
	if _, err := os.Stat(filepath.Join(luaDir, "leased.lua")); err != nil {
		fail("run from the repository root: %v", err)
	}
	chosen := files
	if *fileList != "" {
		chosen = strings.Split(*fileList, ",")
	}
	onlyLines := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s != "" {
			onlyLines[s] = true
		}
	}
	var all []mutant
	perFile := map[string]int{}
	for _, f := range chosen {
		src, err := os.ReadFile(filepath.Join(luaDir, f))
		check(err)
		ms := mutants(f, string(src))
		perFile[f] = len(ms)
		if len(onlyLines) > 0 {
			var keep []mutant
			for _, m := range ms {
				if onlyLines[fmt.Sprintf("%s:%d", m.file, m.line)] {
					keep = append(keep, m)
				}
			}
			ms = keep
		}
		if again != nil {
			var keep []mutant
			for _, m := range ms {
				if again[m.key()] {
					keep = append(keep, m)
				}
			}
			ms = keep
		}
		if *max > 0 && len(ms) > *max {
			r := rand.New(rand.NewPCG(*seed, uint64(len(f))))
			r.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
			ms = ms[:*max]
			sort.Slice(ms, func(i, j int) bool { return ms[i].line < ms[j].line })
		}
		all = append(all, ms...)
	}
	if *list {
		for _, m := range all {
			fmt.Printf("%s:%d %s\n  - %s\n  + %s\n", m.file, m.line, m.op, strings.TrimSpace(m.from), strings.TrimSpace(m.to))
		}
		fmt.Printf("%d mutants\n", len(all))
		return
	}

	tmp, err := os.MkdirTemp("", "sluice-mutate-")
	check(err)
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "lua.test")
	fmt.Printf("building the lua tests (%s)\n", bin)
	build := exec.Command("go", "test", "-c", "-o", bin, "./lua")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	check(build.Run())

	// One directory of scripts per worker, each the embedded set.
	dirs := make([]string, *jobs)
	for i := range dirs {
		dirs[i] = filepath.Join(tmp, fmt.Sprintf("scripts%d", i))
		check(os.Mkdir(dirs[i], 0o755))
		luas, err := filepath.Glob(filepath.Join(luaDir, "*.lua"))
		check(err)
		for _, p := range luas {
			b, err := os.ReadFile(p)
			check(err)
			check(os.WriteFile(filepath.Join(dirs[i], filepath.Base(p)), b, 0o644))
		}
	}
	t := tester{bin: bin, luaDir: luaDir, run: *run, timeout: *timeout}
	if r := t.test(ctx, dirs[0]); r.killed {
		fail("the tests fail on the unmutated scripts (%s); fix that first", r.how)
	}
	fmt.Printf("%d mutants of %d files (of %d generated), %d at a time\n", len(all), len(chosen), sum(perFile), *jobs)

	results := make([]result, len(all))
	var mu sync.Mutex
	next, done := 0, 0
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < *jobs; w++ {
		wg.Add(1)
		go func(dir string) {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(all) || ctx.Err() != nil {
					return
				}
				m := all[i]
				r := t.mutate(ctx, dir, m)
				if ctx.Err() != nil {
					return // interrupted: not a result
				}
				mu.Lock()
				results[i] = r
				done++
				state := "killed (" + r.how + ")"
				if !r.killed {
					state = "SURVIVED"
				}
				fmt.Printf("[%d/%d %s] %s:%d %s: %s\n", done, len(all), time.Since(start).Round(time.Second), m.file, m.line, m.op, state)
				mu.Unlock()
			}
		}(dirs[w])
	}
	wg.Wait()
	if ctx.Err() != nil {
		fmt.Printf("interrupted: %d of %d mutants tested\n", done, len(all))
		var tested []result
		for _, r := range results {
			if r.m.file != "" {
				tested = append(tested, r)
			}
		}
		results = tested
	}
	os.RemoveAll(tmp)
	report(chosen, results)
}

// tester runs the test binary on a directory of scripts.
type tester struct {
	bin, luaDir, run string
	timeout          time.Duration
}

// mutate writes m's file with its one line changed into dir, tests it,
// and puts the file back.
func (t tester) mutate(ctx context.Context, dir string, m mutant) result {
	path := filepath.Join(dir, m.file)
	orig, err := os.ReadFile(path)
	check(err)
	lines := strings.Split(string(orig), "\n")
	if lines[m.line-1] != m.from {
		fail("%s:%d is not the line the mutant was made from", m.file, m.line)
	}
	lines[m.line-1] = m.to
	check(os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644))
	defer func() { check(os.WriteFile(path, orig, 0o644)) }()
	r := t.test(ctx, dir)
	r.m = m
	return r
}

// test runs the tests on the scripts in dir, in their own process group
// (the redis-servers they start die with the test binary: Pdeathsig).
func (t tester) test(parent context.Context, dir string) result {
	ctx, cancel := context.WithTimeout(parent, t.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.bin, "-test.run", t.run, "-test.count=1", "-test.failfast")
	cmd.Dir = t.luaDir
	cmd.Env = append(os.Environ(), "SLUICE_LUA_SCRIPTS="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	begin := time.Now()
	err := cmd.Run()
	r := result{elapsed: time.Since(begin)}
	switch {
	case err == nil:
		return r
	case parent.Err() != nil:
		return r
	case ctx.Err() != nil:
		r.killed, r.how = true, "timeout"
	case bytes.Contains(out.Bytes(), []byte("Error compiling script")):
		r.killed, r.how = true, "script error"
	case bytes.Contains(out.Bytes(), []byte("--- FAIL")):
		r.killed, r.how = true, "failed"
	default:
		fail("the test binary failed without a failing test: %v\n%s", err, out.Bytes())
	}
	return r
}

// report prints a table per file and every survivor.
func report(chosen []string, results []result) {
	type counts struct{ mutants, killed, errors, equivalent, survived int }
	by := map[string]*counts{}
	for _, f := range chosen {
		by[f] = &counts{}
	}
	var survivors, equiv []result
	for _, r := range results {
		c := by[r.m.file]
		c.mutants++
		switch {
		case r.killed:
			c.killed++
			if r.how == "script error" {
				c.errors++
			}
		case equivalent[r.m.key()] != "":
			c.equivalent++
			equiv = append(equiv, r)
		default:
			c.survived++
			survivors = append(survivors, r)
		}
	}
	fmt.Printf("\n%-27s %8s %8s %14s %11s %9s\n", "file", "mutants", "killed", "(script error)", "equivalent", "survived")
	var tot counts
	for _, f := range chosen {
		c := by[f]
		fmt.Printf("%-27s %8d %8d %14d %11d %9d\n", f, c.mutants, c.killed, c.errors, c.equivalent, c.survived)
		tot.mutants += c.mutants
		tot.killed += c.killed
		tot.errors += c.errors
		tot.equivalent += c.equivalent
		tot.survived += c.survived
	}
	fmt.Printf("%-27s %8d %8d %14d %11d %9d\n", "total", tot.mutants, tot.killed, tot.errors, tot.equivalent, tot.survived)
	for _, r := range equiv {
		fmt.Printf("\nequivalent %s:%d %s (%s)\n  - %s\n  + %s\n", r.m.file, r.m.line, r.m.op, equivalent[r.m.key()], strings.TrimSpace(r.m.from), strings.TrimSpace(r.m.to))
	}
	for _, r := range survivors {
		fmt.Printf("\nSURVIVED %s:%d %s\n  - %s\n  + %s\n", r.m.file, r.m.line, r.m.op, strings.TrimSpace(r.m.from), strings.TrimSpace(r.m.to))
	}
	if len(survivors) > 0 {
		os.Exit(1)
	}
}

// survivorsIn are the survivors an earlier run's output lists, by key.
func survivorsIn(path string) map[string]bool {
	b, err := os.ReadFile(path)
	check(err)
	keys := map[string]bool{}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "SURVIVED" || i+2 >= len(lines) {
			continue
		}
		file, _, _ := strings.Cut(f[1], ":")
		from := strings.TrimPrefix(strings.TrimSpace(lines[i+1]), "-")
		to := strings.TrimPrefix(strings.TrimSpace(lines[i+2]), "+")
		keys[file+"|"+strings.TrimSpace(from)+"|"+strings.TrimSpace(to)] = true
	}
	return keys
}

// mutants are the single-line mutants of the script src.
func mutants(file, src string) []mutant {
	var ms []mutant
	lines := strings.Split(src, "\n")
	prev := "" // the previous code line
	for i, line := range lines {
		code, mask := codeOf(line)
		if strings.TrimSpace(code) == "" {
			continue
		}
		add := func(op, to string) {
			if to != line {
				ms = append(ms, mutant{file: file, line: i + 1, op: op, from: line, to: to})
			}
		}
		for _, c := range relational(code, mask) {
			add("rel", c+line[len(code):])
		}
		for _, c := range arithmetic(code, mask) {
			add("arith", c+line[len(code):])
		}
		for _, c := range numbers(code, mask) {
			add("num", c+line[len(code):])
		}
		for _, c := range conditions(code, mask) {
			add("cond", c+line[len(code):])
		}
		if deletable(code, prev) {
			add("del", "")
		}
		prev = code
	}
	return ms
}

// codeOf is line without its comment, and a mask of the code's bytes that
// are inside a string literal.
func codeOf(line string) (string, []bool) {
	mask := make([]bool, len(line))
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			mask[i] = true
			if c == '\\' && i+1 < len(line) {
				i++
				mask[i] = true
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote, mask[i] = c, true
		case c == '-' && i+1 < len(line) && line[i+1] == '-':
			return line[:i], mask[:i]
		}
	}
	return line, mask
}

// relational swaps each comparison outside strings.
func relational(code string, mask []bool) []string {
	var out []string
	for i := 0; i < len(code); i++ {
		if mask[i] {
			continue
		}
		two := ""
		if i+1 < len(code) {
			two = code[i : i+2]
		}
		switch {
		case two == "<=" || two == ">=":
			out = append(out, code[:i]+code[i:i+1]+code[i+2:])
			i++
		case two == "==":
			out = append(out, code[:i]+"~="+code[i+2:])
			i++
		case two == "~=":
			out = append(out, code[:i]+"=="+code[i+2:])
			i++
		case code[i] == '<' || code[i] == '>':
			if two == "<<" || two == ">>" {
				i++
				continue
			}
			out = append(out, code[:i+1]+"="+code[i+1:])
		}
	}
	return out
}

// arithmetic swaps each binary + and - outside strings.
func arithmetic(code string, mask []bool) []string {
	var out []string
	for i := 0; i < len(code); i++ {
		if mask[i] {
			continue
		}
		switch code[i] {
		case '+':
			out = append(out, code[:i]+"-"+code[i+1:])
		case '-':
			// Binary: after an operand (a name, a number, a closing
			// bracket), skipping spaces.
			j := i - 1
			for j >= 0 && code[j] == ' ' {
				j--
			}
			if j < 0 {
				continue
			}
			c := code[j]
			if c == ')' || c == ']' || c == '_' || isAlnum(c) {
				if w := lastWord(code[:j+1]); luaKeyword[w] {
					continue // return -x, and -x, ...
				}
				out = append(out, code[:i]+"+"+code[i+1:])
			}
		}
	}
	return out
}

var number = regexp.MustCompile(`[0-9]+(\.[0-9]+)?([eE][0-9]+)?`)

// numbers changes each integer literal outside strings to one more.
func numbers(code string, mask []bool) []string {
	var out []string
	for _, loc := range number.FindAllStringIndex(code, -1) {
		a, b := loc[0], loc[1]
		if mask[a] || a > 0 && (isAlnum(code[a-1]) || code[a-1] == '_' || code[a-1] == '.') {
			continue // in a string, a name (W2, x1) or a number already
		}
		if b < len(code) && (isAlnum(code[b]) || code[b] == '.') {
			continue
		}
		lit := code[a:b]
		var to string
		if n, err := strconv.ParseInt(lit, 10, 64); err == nil {
			to = strconv.FormatInt(n+1, 10)
		} else if f, err := strconv.ParseFloat(lit, 64); err == nil {
			to = strconv.FormatFloat(f+1, 'g', -1, 64)
		} else {
			continue
		}
		out = append(out, code[:a]+to+code[b:])
	}
	return out
}

var condition = regexp.MustCompile(`^(\s*(?:if|elseif|while|until)\s+)(.*?)(\s+(?:then|do)\b.*)?$`)

// conditions drops each operand of a top-level and/or of the line's
// condition.
func conditions(code string, mask []bool) []string {
	m := condition.FindStringSubmatchIndex(code)
	if m == nil {
		return nil
	}
	cs, ce := m[4], m[5]
	// The top-level operands: split at " and " / " or " outside brackets
	// and strings.
	var cuts [][2]int // the connectors' spans
	depth := 0
	for i := cs; i < ce; i++ {
		if mask[i] {
			continue
		}
		switch code[i] {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		}
		if depth != 0 {
			continue
		}
		for _, w := range []string{" and ", " or "} {
			if strings.HasPrefix(code[i:ce], w) {
				cuts = append(cuts, [2]int{i, i + len(w)})
			}
		}
	}
	if len(cuts) == 0 {
		return nil
	}
	var out []string
	// Operand k spans from the end of connector k-1 to the start of
	// connector k; dropping it drops one of its connectors too.
	for k := 0; k <= len(cuts); k++ {
		a, b := cs, cuts[0][1] // the first operand and the connector after it
		if k > 0 {
			a, b = cuts[k-1][0], ce // the connector before it and the operand
			if k < len(cuts) {
				b = cuts[k][0]
			}
		}
		out = append(out, code[:a]+code[b:])
	}
	return out
}

// deletable is whether code is a statement line a mutant may delete: an
// assignment or call, whole on its line, no declaration, no block
// structure.
func deletable(code, prev string) bool {
	s := strings.TrimSpace(code)
	w := firstWord(s)
	if luaKeyword[w] && !(w == "if" && strings.HasSuffix(s, " end")) {
		return false // a block's structure (a one-line if ... end may go)
	}
	if strings.HasPrefix(s, "}") || strings.HasPrefix(s, ")") {
		return false
	}
	if !balanced(code) || continues(strings.TrimSpace(prev)) || continues(s) {
		return false
	}
	return true
}

// continues is whether a statement ending so continues on the next line.
func continues(s string) bool {
	for _, end := range []string{",", "(", "{", "[", "=", "..", "+", "-", "*", "/", " and", " or"} {
		if strings.HasSuffix(s, end) {
			return true
		}
	}
	return false
}

func balanced(s string) bool {
	_, mask := codeOf(s)
	d := 0
	for i := 0; i < len(s) && i < len(mask); i++ {
		if mask[i] {
			continue
		}
		switch s[i] {
		case '(', '[', '{':
			d++
		case ')', ']', '}':
			d--
		}
	}
	return d == 0
}

var luaKeyword = map[string]bool{"local": true, "return": true, "break": true, "if": true, "elseif": true, "else": true,
	"end": true, "for": true, "while": true, "repeat": true, "until": true, "do": true, "function": true,
	"and": true, "or": true, "not": true, "then": true, "in": true, "goto": true}

func firstWord(s string) string {
	i := 0
	for i < len(s) && (isAlnum(s[i]) || s[i] == '_') {
		i++
	}
	return s[:i]
}

func lastWord(s string) string {
	i := len(s)
	for i > 0 && (isAlnum(s[i-1]) || s[i-1] == '_') {
		i--
	}
	return s[i:]
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func check(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "mutate: "+format+"\n", args...)
	os.Exit(2)
}
