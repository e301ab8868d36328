// Command sluice is the command line of a Sluice node: checks, rules
// (get, apply, delete, diff, lint, test), members, hot keys and its own
// version (sluice version, or sluice -version). sluice -h lists the
// commands (the usage text below), sluice COMMAND -h describes one.
//
// The global flags (-addr, -token, -o, -timeout) go before or after the
// command. The node is -addr, else SLUICE_ADDR, else
// http://localhost:8080; the admin token is -token, else
// SLUICE_ADMIN_TOKEN. Output is a readable table, or JSON with -o json
// (every command). A request the node has not answered after a second is
// named on stderr ("sluice: waiting for GET http://…/v1/members"); it
// fails after -timeout (10s). A failure prints one line, "sluice: ...", on
// stderr and exits 1 (2 for a usage error, 3 for a denied check).
//
// cmd/sluice talks to nodes through node/client (client.Admin). It also
// imports node/rules, for the offline lint and to write rules back out as
// a rule file (rules get -o yaml): the validator itself, not a copy that
// could drift.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/node/client"
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
	out    io.Writer // stdout
	errOut io.Writer // stderr, for notices
	// The global flags.
	addr    string
	token   string
	output  string // -o before the command: the command's default format
	timeout time.Duration
	// after is time.After; tests replace it to fire the waiting notice.
	after func(time.Duration) <-chan time.Time
	cmd   command // the command being run
	admin *client.Admin
}

// command is one of sluice's commands.
type command struct {
	name    string // "rules get"
	args    string // its synopsis after the name
	summary string // what it does, one sentence
	run     func(*cli, []string) error
}

// commands are sluice's commands; "rules" groups those named "rules ...".
var commands = []command{
	{"check", "RULE KEY [-hits N]", "Check (and charge) one key against a rule; exit 0 allowed, 3 denied.", (*cli).check},
	{"rules get", "[NAME] [-o table|yaml|json]", "Show the node's rules, or one rule; -o yaml writes a rule file.", (*cli).rulesGet},
	{"rules apply", "-f FILE [-dry-run] [-if-match N]", "Replace the node's rules with a rule file (- for stdin), as one version.", (*cli).rulesApply},
	{"rules delete", "NAME [-dry-run] [-if-match N]", "Remove one rule.", (*cli).rulesDelete},
	{"rules diff", "-f FILE", "Show what rules apply -f FILE would change; nothing is written.", (*cli).rulesDiff},
	{"rules lint", "FILE...", "Validate rule files offline (no node needed), with this build's rules and algorithms: " + algorithmList() + ".", (*cli).rulesLint},
	{"rules test", "[-method M] [-path P] [-host H] [-ip IP] [-H 'Name: value']...", "Show which rules match that request, with which counter key.", (*cli).rulesTest},
	{"members", "", "Show the cluster's members as the node sees them.", (*cli).members},
	{"hotkeys", "", "Show the node's hot keys and split keys.", (*cli).hotkeys},
	{"version", "", "Show the version of sluice (module version and VCS revision).", (*cli).version},
}

func lookup(name string) (command, bool) {
	for _, cmd := range commands {
		if cmd.name == name {
			return cmd, true
		}
	}
	return command{}, false
}

const usage = `Usage: sluice [global flags] COMMAND [flags] [args]

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
  version                             the version of sluice (also -version, --version)

Global flags, before or after the command:
  -addr URL     the node (default $SLUICE_ADDR, else http://localhost:8080)
  -token T      admin token (default $SLUICE_ADMIN_TOKEN)
  -o FORMAT     output: table (default) or json; rules get also yaml
  -timeout D    how long to wait for the node's answer (default 10s)

sluice COMMAND -h (or sluice help COMMAND) describes a command.
`

// rulesUsage is sluice rules -h.
const rulesUsage = `Usage: sluice rules get|apply|delete|diff|lint|test [flags] [args]

The node's rate-limit rules: show, replace, delete, compare, validate and
test them. sluice rules COMMAND -h describes one.

  rules get [NAME] [-o table|yaml|json]
  rules apply -f FILE [-dry-run] [-if-match N]
  rules delete NAME [-dry-run] [-if-match N]
  rules diff -f FILE                  what apply would change
  rules lint FILE...                  validate rule files offline
  rules test [-method M] [-path P] [-host H] [-ip IP] [-H 'Name: value']...
`

// defaultTimeout bounds each request to the node (-timeout).
const defaultTimeout = 10 * time.Second

// run is sluice; it returns the exit code.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := &cli{getenv: getenv, out: stdout, errOut: stderr, timeout: defaultTimeout, after: time.After}
	return c.exit(c.main(args))
}

// exit prints err (or the help asked for) and returns the exit code.
func (c *cli) exit(err error) int {
	var help helpText
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errDenied):
		return exitDenied
	case errors.As(err, &help):
		fmt.Fprint(c.out, string(help))
		return exitOK
	case errors.Is(err, errUsage):
		fmt.Fprintf(c.errOut, "sluice: %s (sluice -h for help)\n", oneLine(err.Error()))
		return exitUsage
	}
	fmt.Fprintf(c.errOut, "sluice: %s\n", oneLine(err.Error()))
	return exitFail
}

// oneLine keeps an error on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// errDenied: check was answered with a denial (exit 3, no message).
var errDenied = errors.New("denied")

func (c *cli) main(args []string) error {
	fs := newFlags("sluice")
	c.globalFlags(fs, true)
	showVersion := fs.Bool("version", false, "") // -version, --version: sluice version
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return helpText(usage)
		}
		return usagef("%v", err)
	}
	args = fs.Args()
	if *showVersion {
		c.cmd, _ = lookup("version")
		return c.version(args)
	}
	if len(args) == 0 {
		return usagef("no command")
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help":
		if len(rest) == 0 {
			return helpText(usage)
		}
		return c.main(append(rest, "-h"))
	case "rules":
		// Global flags may come between rules and its command.
		fs := newFlags("rules")
		c.globalFlags(fs, true)
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return helpText(rulesUsage)
			}
			return usagef("rules: %v", err)
		}
		if fs.NArg() == 0 {
			return usagef("rules: want get, apply, delete, diff, lint or test")
		}
		name, rest = "rules "+fs.Arg(0), fs.Args()[1:]
		if _, ok := lookup(name); !ok {
			return usagef("rules: unknown command %q (want get, apply, delete, diff, lint or test)", fs.Arg(0))
		}
	}
	cmd, ok := lookup(name)
	if !ok {
		return usagef("unknown command %q", name)
	}
	c.cmd = cmd
	return cmd.run(c, rest)
}
