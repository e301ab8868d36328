// Command mutate is the Lua scripts' mutation harness (make mutate-lua):
// it proves that the parity tests (TestGoLuaParityCorners,
// TestGoLuaParityEdges, TestGoLuaParity, TestFastPathMatchesGeneral) fail
// when one line of one algorithm's script changes. It builds the lua
// package's test binary once, then for each single-line mutant of the
// scripts writes the scripts to a directory with that one line changed,
// runs the parity tests on them (the test-only hook SLUICE_LUA_SCRIPTS,
// lua/scriptdir_test.go) and records whether they failed (killed) or
// passed (survived). A mutant's run stops at its first failure
// (-test.failfast) and runs only the subtests of the algorithms whose
// keys run the mutated script (served, below), and of TestGoLuaParity the
// calls alone: the lines a batch runs are the same. Run from the
// repository root:
//
//	go run ./lua/testdata/mutate [-max N] [-seed S] [-timeout D] [-j N] [-files a.lua,b.lua] [-only file:line] [-rerun out.txt] [-tests T1|T2] [-list]
//
// -rerun tests only the mutants an earlier run's output lists as
// survivors (matched by file and the line's text, so edits elsewhere in
// the file do not lose them). An interrupt (^C) stops the run, kills the
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
// change behaviour, is listed in equivalent (equivalent.go) with the
// reason; the harness runs it too, reports it apart from the survivors
// (which are gaps in the tests), and fails a run in which one is killed
// (the reason is wrong). Every run prints a table per file, each survivor
// and the mean time of a mutant's tests.
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

const leasedAlgorithms = "token_bucket|gcra|fixed_window|sliding_window"

// served are the algorithms whose keys run each script: a mutant's tests
// run only their subtests (the parity tests have one per algorithm), as
// no other key runs the mutated line.
var served = map[string]string{
	"leased.lua":              leasedAlgorithms,
	"prelude.lua":             leasedAlgorithms + "|sliding_log|concurrency",
	"sliding_log.lua":         "sliding_log",
	"concurrency_acquire.lua": "concurrency",
	"concurrency_release.lua": "concurrency",
}

func algorithmsOf(file string) string {
	if a, ok := served[file]; ok {
		return a
	}
	for _, suffix := range []string{"_lease.lua", "_return.lua"} {
		if a, ok := strings.CutSuffix(file, suffix); ok {
			return a
		}
	}
	fail("no algorithm runs %s: add it to served", file)
	return ""
}

// pattern is the -test.run pattern of a mutant of file: the tests, each
// its subtests of the algorithms that run file, and of those the calls
// alone (TestGoLuaParity's batched subtests run the same lines, in a
// batch) and every scenario of TestGoLuaParityCorners (their names
// have a hyphen); and TestReleaseAtItsExpiry for the concurrency scripts.
func pattern(tests, file string) string {
	a := algorithmsOf(file)
	if a == "concurrency" {
		tests += "|TestReleaseAtItsExpiry"
	}
	return "^(" + tests + ")$/^(" + a + ")$/^(single|.*-.*)$"
}

// mutant is one changed line.
type mutant struct {
	file string
	line int    // 1-based
	nth  int    // the line is the file's nth of its text (trimmed)
	op   string // rel, arith, num, cond, del
	from string // the line as it was
	to   string // the line as mutated
}

// key names m by its file, its line's text and the mutated text (and,
// for the second line of a text and after, the line's rank: n), so that
// edits elsewhere in the file keep it.
func (m mutant) key() string {
	k := m.file + "|" + strings.TrimSpace(m.from) + "|" + strings.TrimSpace(m.to)
	if m.nth > 1 {
		k += "|" + strconv.Itoa(m.nth)
	}
	return k
}

// text is key without the rank: -rerun matches survivors by it.
func (m mutant) text() string {
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
	timeout := flag.Duration("timeout", time.Minute, "a mutant's test run is killed (and the mutant counted killed) after this")
	jobs := flag.Int("j", 1, "mutants tested at once")
	only := flag.String("only", "", "test only the mutants of file:line (comma-separated)")
	fileList := flag.String("files", "", "mutate only these files (comma-separated)")
	list := flag.Bool("list", false, "print the mutants and exit")
	rerun := flag.String("rerun", "", "test only the survivors listed in this earlier run's output")
	run := flag.String("tests", "TestGoLuaParityCorners|TestGoLuaParityEdges|TestGoLuaParity|TestFastPathMatchesGeneral", "the tests run on each mutant (|-separated names): of each, the subtests of the algorithms that run the mutated script")
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
				if again[m.text()] {
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
	if r := t.test(ctx, dirs[0], pattern(t.run, "prelude.lua")); r.killed {
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
	if len(results) > 0 {
		var total time.Duration
		for _, r := range results {
			total += r.elapsed
		}
		fmt.Printf("\n%d mutants in %v, %d at a time: %v per mutant's tests\n", len(results), time.Since(start).Round(time.Second), *jobs, (total / time.Duration(len(results))).Round(10*time.Millisecond))
	}
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
	r := t.test(ctx, dir, pattern(t.run, m.file))
	r.m = m
	return r
}

// test runs the tests on the scripts in dir, in their own process group
// (the redis-servers they start die with the test binary: Pdeathsig).
func (t tester) test(parent context.Context, dir, run string) result {
	ctx, cancel := context.WithTimeout(parent, t.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.bin, "-test.run", run, "-test.count=1", "-test.failfast")
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
	var survivors, equiv, wrong []result
	for _, r := range results {
		c := by[r.m.file]
		c.mutants++
		switch {
		case r.killed:
			c.killed++
			if r.how == "script error" {
				c.errors++
			}
			if equivalent[r.m.key()] != "" {
				wrong = append(wrong, r)
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
	for _, r := range wrong {
		fmt.Printf("\nKILLED, listed equivalent (remove it from equivalent.go) %s:%d %s\n  - %s\n  + %s\n", r.m.file, r.m.line, r.m.op, strings.TrimSpace(r.m.from), strings.TrimSpace(r.m.to))
	}
	for _, r := range survivors {
		fmt.Printf("\nSURVIVED %s:%d %s\n  - %s\n  + %s\n", r.m.file, r.m.line, r.m.op, strings.TrimSpace(r.m.from), strings.TrimSpace(r.m.to))
	}
	if len(survivors) > 0 || len(wrong) > 0 {
		os.Exit(1)
	}
}

// survivorsIn are the survivors an earlier run's output lists, by text
// (mutant.text: every line of that text).
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
