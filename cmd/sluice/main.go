// Command sluice is the command line of a Sluice node: checks, rules
// (get, apply, delete, diff, lint, test), members and hot keys.
//
//	sluice [-addr URL] [-token T] COMMAND [flags] [args]
//
//	check RULE KEY [-hits N]        one check; exit 0 allowed, 3 denied
//	rules get [NAME] [-o table|yaml|json]
//	rules apply -f FILE [-dry-run] [-if-match N]   a whole rule file, as one version
//	rules delete NAME [-dry-run] [-if-match N]
//	rules diff -f FILE              what apply would change (nothing written)
//	rules lint FILE...              validate rule files offline
//	rules test [-method M] [-path P] [-host H] [-ip IP] [-H 'Name: value']...
//	                                which rules match that request, with which key
//	members                         the cluster as the node sees it
//	hotkeys                         the node's hot keys and splits
//
// The node is -addr, else SLUICE_ADDR, else http://localhost:8080; the
// admin token is -token, else SLUICE_ADMIN_TOKEN. Output is a readable
// table, or JSON with -o json (every command). A failure prints one line,
// "sluice: ...", on stderr and exits 1 (2 for a usage error).
//
// cmd/sluice talks to nodes through node/client (client.Admin). It also
// imports node/rules, for the offline lint and to write rules back out as
// a rule file (rules get -o yaml): the validator itself, not a copy that
// could drift.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/node/client"
	"github.com/sluicehq/sluice/node/rules"
)

// Exit codes.
const (
	exitOK     = 0
	exitFail   = 1
	exitUsage  = 2
	exitDenied = 3
)

const defaultAddr = "http://localhost:8080"

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// errUsage marks a usage error (exit 2).
var errUsage = errors.New("usage")

type usageError struct{ msg string }

func (e usageError) Error() string   { return e.msg }
func (e usageError) Is(t error) bool { return t == errUsage }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// cli is one invocation.
type cli struct {
	getenv func(string) string
	out    io.Writer
	addr   string
	token  string
	admin  *client.Admin
}

const usage = `Usage: sluice [-addr URL] [-token T] COMMAND [flags] [args]

Commands:
  check RULE KEY [-hits N]            one check (exit 0 allowed, 3 denied)
  rules get [NAME] [-o table|yaml|json]
  rules apply -f FILE [-dry-run] [-if-match N]
  rules delete NAME [-dry-run] [-if-match N]
  rules diff -f FILE                  what apply would change
  rules lint FILE...                  validate rule files offline
  rules test [-method M] [-path P] [-host H] [-ip IP] [-H 'Name: value']...
  members                             the cluster's members
  hotkeys                             hot keys and splits

The node is -addr, else SLUICE_ADDR, else http://localhost:8080; the admin
token is -token, else SLUICE_ADMIN_TOKEN. Every command takes -o json.
`

// run is sluice; it returns the exit code.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := &cli{getenv: getenv, out: stdout}
	err := c.main(args)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errDenied):
		return exitDenied
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return exitOK
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "sluice: %s (sluice -h for help)\n", oneLine(err.Error()))
		return exitUsage
	}
	fmt.Fprintf(stderr, "sluice: %s\n", oneLine(err.Error()))
	return exitFail
}

// oneLine keeps an error on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// errDenied: check was answered with a denial (exit 3, no message).
var errDenied = errors.New("denied")

func (c *cli) main(args []string) error {
	fs := newFlags("sluice")
	fs.StringVar(&c.addr, "addr", "", "node URL (default $SLUICE_ADDR, else "+defaultAddr+")")
	fs.StringVar(&c.token, "token", "", "admin token (default $SLUICE_ADMIN_TOKEN)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	args = fs.Args()
	if len(args) == 0 {
		return usagef("no command")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "check":
		return c.check(rest)
	case "rules":
		if len(rest) == 0 {
			return usagef("rules: want get, apply, delete, diff, lint or test")
		}
		sub, rest := rest[0], rest[1:]
		switch sub {
		case "get":
			return c.rulesGet(rest)
		case "apply":
			return c.rulesApply(rest)
		case "delete":
			return c.rulesDelete(rest)
		case "diff":
			return c.rulesDiff(rest)
		case "lint":
			return c.rulesLint(rest)
		case "test":
			return c.rulesTest(rest)
		}
		return usagef("rules: unknown command %q (want get, apply, delete, diff, lint or test)", sub)
	case "members":
		return c.members(rest)
	case "hotkeys":
		return c.hotkeys(rest)
	case "help":
		return flag.ErrHelp
	}
	return usagef("unknown command %q", cmd)
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parse parses a command's args, letting flags and positional arguments
// mix ("rules get NAME -o yaml"), and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		if fs.NArg() == 0 {
			if f := fs.Lookup("o"); f != nil {
				if o, ok := f.Value.(*output); ok {
					if err := checkOutput(o.v, o.formats...); err != nil {
						return nil, err
					}
				}
			}
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// client returns the Admin of the node.
func (c *cli) client() (*client.Admin, error) {
	if c.admin != nil {
		return c.admin, nil
	}
	addr := c.addr
	if addr == "" {
		addr = c.getenv("SLUICE_ADDR")
	}
	if addr == "" {
		addr = defaultAddr
	}
	token := c.token
	if token == "" {
		token = c.getenv("SLUICE_ADMIN_TOKEN")
	}
	a, err := client.NewAdmin(client.AdminConfig{Addr: addr, Token: token, Actor: actor(c.getenv)})
	if err != nil {
		return nil, usagef("node address: %v", err)
	}
	c.admin = a
	return a, nil
}

// actor is user@host, for the node's change log.
func actor(getenv func(string) string) string {
	name := getenv("USER")
	if u, err := user.Current(); name == "" && err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return "sluice-cli:" + name + "@" + host
}

func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// outputFlag adds -o with the allowed formats (the first is the default);
// parse refuses any other format.
func outputFlag(fs *flag.FlagSet, formats ...string) *string {
	o := &output{v: formats[0], formats: formats}
	fs.Var(o, "o", "output: "+strings.Join(formats, ", "))
	return &o.v
}

// output is the value of a command's -o flag and the formats it offers.
type output struct {
	v       string
	formats []string
}

func (o *output) String() string {
	if o == nil {
		return ""
	}
	return o.v
}

func (o *output) Set(s string) error { o.v = s; return nil }

func checkOutput(o string, formats ...string) error {
	for _, f := range formats {
		if o == f {
			return nil
		}
	}
	return usagef("-o %s: want %s", o, strings.Join(formats, ", "))
}

func (c *cli) json(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.out, "%s\n", b)
	return err
}

func (c *cli) table(header string, rows [][]string) {
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

func (c *cli) check(args []string) error {
	fs := newFlags("check")
	hits := fs.Int64("hits", 1, "hits to charge (0 peeks)")
	o := outputFlag(fs, "table", "json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("check: want RULE KEY")
	}
	a, err := c.client()
	if err != nil {
		return err
	}
	cx, cancel := ctx()
	defer cancel()
	r, err := a.Check(cx, pos[0], pos[1], *hits)
	if err != nil {
		return err
	}
	if *o == "json" {
		err = c.json(map[string]any{"allowed": r.Allowed, "rule": r.Rule, "key": r.Key, "limit": r.Limit,
			"remaining": r.Remaining, "reset_ms": r.ResetMS, "retry_after_ms": r.RetryAfterMS, "degraded": r.Degraded})
	} else {
		decision := "allowed"
		if !r.Allowed {
			decision = "denied"
		}
		if r.Degraded {
			decision += " (degraded)"
		}
		c.table("DECISION\tRULE\tKEY\tLIMIT\tREMAINING\tRESET\tRETRY-AFTER", [][]string{{decision, r.Rule, r.Key,
			strconv.FormatInt(r.Limit, 10), strconv.FormatInt(r.Remaining, 10), ms(r.ResetMS), ms(r.RetryAfterMS)}})
	}
	if err != nil {
		return err
	}
	if !r.Allowed {
		return errDenied
	}
	return nil
}

func ms(v int64) string { return (time.Duration(v) * time.Millisecond).String() }

// specs decodes the rules' JSON as rule specs.
func specs(raw []json.RawMessage) ([]rules.Spec, error) {
	out := make([]rules.Spec, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			return nil, fmt.Errorf("cannot read rule %d of the node's answer: %w", i, err)
		}
	}
	return out, nil
}

func (c *cli) rulesGet(args []string) error {
	fs := newFlags("rules get")
	o := outputFlag(fs, "table", "yaml", "json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("rules get: want at most one NAME")
	}
	a, err := c.client()
	if err != nil {
		return err
	}
	cx, cancel := ctx()
	defer cancel()
	var rs client.RuleSet
	if len(pos) == 1 {
		r, v, err := a.Rule(cx, pos[0])
		if err != nil {
			return err
		}
		rs = client.RuleSet{Version: v, Rules: []json.RawMessage{r}}
		if *o == "json" {
			return c.json(r)
		}
	} else {
		if rs, err = a.Rules(cx); err != nil {
			return err
		}
		if *o == "json" {
			return c.json(rs)
		}
	}
	list, err := specs(rs.Rules)
	if err != nil {
		return err
	}
	if *o == "yaml" {
		enc := yaml.NewEncoder(c.out)
		enc.SetIndent(2)
		if len(pos) == 1 {
			err = enc.Encode(list[0])
		} else {
			err = enc.Encode(struct {
				Rules []rules.Spec `yaml:"rules"`
			}{list})
		}
		if err != nil {
			return err
		}
		return enc.Close()
	}
	rows := make([][]string, 0, len(list))
	for _, s := range list {
		burst := ""
		if s.Burst != 0 {
			burst = strconv.FormatInt(s.Burst, 10)
		}
		rows = append(rows, []string{s.Name, s.Algorithm, strconv.FormatInt(s.Limit, 10), s.Period, burst,
			dash(s.Key), strconv.Itoa(len(s.Overrides))})
	}
	if len(pos) == 0 {
		src := rs.Source
		if rs.File != "" {
			src += " " + rs.File
		}
		fmt.Fprintf(c.out, "version %d, source %s, %d rules\n", rs.Version, src, len(list))
	}
	c.table("NAME\tALGORITHM\tLIMIT\tPERIOD\tBURST\tKEY\tOVERRIDES", rows)
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// readFile reads a rule file ("-" is stdin).
func readFile(path string) ([]byte, error) {
	if path == "" {
		return nil, usagef("want -f FILE")
	}
	if path == "-" {
		return io.ReadAll(io.LimitReader(os.Stdin, rules.MaxFileBytes+1))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// writeFlags adds -dry-run and -if-match.
func writeFlags(fs *flag.FlagSet) *client.WriteOptions {
	var o client.WriteOptions
	fs.BoolVar(&o.DryRun, "dry-run", false, "validate and show the change, write nothing")
	fs.Uint64Var(&o.IfMatch, "if-match", 0, "fail unless the node's rules are at this version")
	return &o
}

func (c *cli) rulesApply(args []string) error {
	fs := newFlags("rules apply")
	file := fs.String("f", "", "rule file (- for stdin)")
	wo := writeFlags(fs)
	o := outputFlag(fs, "table", "json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("rules apply: unexpected %q (want -f FILE)", pos[0])
	}
	data, err := readFile(*file)
	if err != nil {
		return err
	}
	a, err := c.client()
	if err != nil {
		return err
	}
	cx, cancel := ctx()
	defer cancel()
	ch, err := a.ApplyRules(cx, data, *wo)
	if err != nil {
		return err
	}
	return c.change(ch, *o)
}

func (c *cli) rulesDelete(args []string) error {
	fs := newFlags("rules delete")
	wo := writeFlags(fs)
	o := outputFlag(fs, "table", "json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("rules delete: want NAME")
	}
	a, err := c.client()
	if err != nil {
		return err
	}
	cx, cancel := ctx()
	defer cancel()
	ch, err := a.DeleteRule(cx, pos[0], *wo)
	if err != nil {
		return err
	}
	return c.change(ch, *o)
}

func (c *cli) rulesDiff(args []string) error {
	fs := newFlags("rules diff")
	file := fs.String("f", "", "rule file (- for stdin)")
	o := outputFlag(fs, "table", "json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("rules diff: unexpected %q", pos[0])
	}
	data, err := readFile(*file)
	if err != nil {
		return err
	}
	a, err := c.client()
	if err != nil {
		return err
	}
	cx, cancel := ctx()
	defer cancel()
	ch, err := a.ValidateRules(cx, data)
	if err != nil {
		return err
	}
	return c.change(ch, *o)
}

// change prints a write's or a dry run's answer.
func (c *cli) change(ch client.Change, o string) error {
	if o == "json" {
		return c.json(ch)
	}
	switch {
	case ch.Empty():
		fmt.Fprintf(c.out, "no change (version %d)\n", ch.Version)
		return nil
	case ch.DryRun:
		fmt.Fprintf(c.out, "would change version %d (dry run, nothing written):\n", ch.Version)
	default:
		fmt.Fprintf(c.out, "version %d -> %d:\n", ch.PreviousVersion, ch.Version)
	}
	for _, n := range ch.Added {
		fmt.Fprintf(c.out, "  + %s\n", n)
	}
	for _, n := range ch.Changed {
		fmt.Fprintf(c.out, "  ~ %s\n", n)
	}
	for _, n := range ch.Removed {
		fmt.Fprintf(c.out, "  - %s\n", n)
	}
	return nil
}

func (c *cli) rulesLint(args []string) error {
	fs := newFlags("rules lint")
	o := outputFlag(fs, "table", "json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("rules lint: want FILE...")
	}
	type result struct {
		File  string `json:"file"`
		Rules int    `json:"rules"`
		Error string `json:"error,omitempty"`
	}
	var res []result
	var firstErr error
	for _, path := range pos {
		data, err := readFile(path)
		if err == nil {
			var s *rules.Set
			if s, err = rules.Parse(data); err == nil {
				res = append(res, result{File: path, Rules: s.Len()})
				continue
			}
		}
		res = append(res, result{File: path, Error: oneLine(err.Error())})
		if firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", path, err)
		}
	}
	if *o == "json" {
		if err := c.json(res); err != nil {
			return err
		}
	} else {
		for _, r := range res {
			if r.Error == "" {
				fmt.Fprintf(c.out, "%s: ok, %d rules\n", r.File, r.Rules)
			}
		}
	}
	return firstErr
}

// headerFlags collects -H 'Name: value'.
type headerFlags map[string]string

func (h headerFlags) String() string { return "" }

func (h headerFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("want 'Name: value', got %q", v)
	}
	h[strings.TrimSpace(k)] = strings.TrimSpace(val)
	return nil
}

func (c *cli) rulesTest(args []string) error {
	fs := newFlags("rules test")
	var req client.TestRequest
	fs.StringVar(&req.Method, "method", "GET", "the request's method")
	fs.StringVar(&req.Path, "path", "/", "the request's path and query")
	fs.StringVar(&req.Host, "host", "", "the request's host")
	fs.StringVar(&req.IP, "ip", "", "the client's IP (default 127.0.0.1)")
	hdrs := headerFlags{}
	fs.Var(hdrs, "H", "a request header 'Name: value' (repeatable)")
	o := outputFlag(fs, "table", "json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("rules test: unexpected %q", pos[0])
	}
	req.Headers = hdrs
	a, err := c.client()
	if err != nil {
		return err
	}
	cx, cancel := ctx()
	defer cancel()
	r, err := a.TestRules(cx, req)
	if err != nil {
		return err
	}
	if *o == "json" {
		return c.json(r)
	}
	if len(r.Matches) == 0 {
		fmt.Fprintf(c.out, "no rule matches (version %d)\n", r.Version)
		return nil
	}
	rows := make([][]string, 0, len(r.Matches))
	for _, m := range r.Matches {
		rows = append(rows, []string{m.Rule, m.Key})
	}
	c.table("RULE\tKEY", rows)
	return nil
}

func (c *cli) members(args []string) error {
	fs := newFlags("members")
	o := outputFlag(fs, "table", "json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("members: unexpected %q", pos[0])
	}
	a, err := c.client()
	if err != nil {
		return err
	}
	cx, cancel := ctx()
	defer cancel()
	m, err := a.Members(cx)
	if err != nil {
		return err
	}
	if *o == "json" {
		return c.json(m)
	}
	rows := make([][]string, 0, len(m.Members))
	for _, mb := range m.Members {
		name := mb.Name
		if name == m.Self {
			name += " (self)"
		}
		rows = append(rows, []string{name, mb.State, dash(mb.HTTPAddr), dash(mb.GossipAddr)})
	}
	c.table("NAME\tSTATE\tHTTP\tGOSSIP", rows)
	return nil
}

func (c *cli) hotkeys(args []string) error {
	fs := newFlags("hotkeys")
	o := outputFlag(fs, "table", "json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("hotkeys: unexpected %q", pos[0])
	}
	a, err := c.client()
	if err != nil {
		return err
	}
	cx, cancel := ctx()
	defer cancel()
	h, err := a.HotKeys(cx)
	if err != nil {
		return err
	}
	if *o == "json" {
		return c.json(h)
	}
	fmt.Fprintf(c.out, "node %s: %.0f checks/s\n", h.Self, h.NodeRate)
	if len(h.Top) == 0 && len(h.Splits) == 0 {
		fmt.Fprintln(c.out, "no hot keys")
		return nil
	}
	sort.SliceStable(h.Top, func(i, j int) bool { return h.Top[i].Rate > h.Top[j].Rate })
	rows := make([][]string, 0, len(h.Top)+len(h.Splits))
	for _, k := range h.Top {
		split := "-"
		if k.Split {
			split = strings.Join(k.Holders, ",")
		}
		rows = append(rows, []string{k.Key, strconv.FormatFloat(k.Rate, 'f', 0, 64), strconv.FormatUint(k.Count, 10), split})
	}
	c.table("KEY\tRATE/S\tCOUNT\tSPLIT OVER", rows)
	if len(h.Splits) > 0 {
		fmt.Fprintln(c.out)
		rows = rows[:0]
		for _, s := range h.Splits {
			rows = append(rows, []string{s.Key, s.Owner, strconv.FormatUint(s.Epoch, 10), strings.Join(s.Holders, ",")})
		}
		c.table("SPLIT KEY\tOWNER\tEPOCH\tHOLDERS", rows)
	}
	return nil
}
