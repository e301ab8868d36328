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
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

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
