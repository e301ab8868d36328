package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/node/client"
)

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// globalFlags adds -addr, -token, -timeout and, when withOutput, -o (a
// command has its own -o, which takes the global one as its default).
// Each keeps the value given so far, so they may come before the command,
// after it, or both (the last wins).
func (c *cli) globalFlags(fs *flag.FlagSet, withOutput bool) {
	fs.StringVar(&c.addr, "addr", c.addr, "the node's `URL` (default $SLUICE_ADDR, else "+defaultAddr+")")
	fs.StringVar(&c.token, "token", c.token, "admin `token` (default $SLUICE_ADMIN_TOKEN)")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "how long to wait for the node's answer")
	if withOutput {
		fs.StringVar(&c.output, "o", c.output, "output `format`")
	}
}

// helpText is the answer to -h: printed on stdout, exit 0.
type helpText string

func (h helpText) Error() string { return string(h) }

// help is the -h text of the command being run, listing the flags defined
// on fs so far.
func (c *cli) help(fs *flag.FlagSet) helpText {
	cmd := c.cmd
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: sluice %s %s\n\n%s\n", cmd.name, cmd.args, cmd.summary)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		b.WriteString("\nFlags:\n")
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	b.WriteString("\nGlobal flags, before or after the command: -addr URL, -token T, -o FORMAT, -timeout D (sluice -h).\n")
	return helpText(b.String())
}

// parse parses a command's args, letting flags and positional arguments
// mix ("rules get NAME -o yaml") and accepting the global flags among
// them, and returns the positional ones. -h (-help, --help) answers the
// command's help.
func (c *cli) parse(fs *flag.FlagSet, args []string) ([]string, error) {
	h := c.help(fs) // before the global flags: they are described once, by sluice -h
	c.globalFlags(fs, false)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, h
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

// outputFlag adds -o with the allowed formats; its default is the global
// -o if one was given, else the first format. parse refuses any other
// format.
func (c *cli) outputFlag(fs *flag.FlagSet, formats ...string) *string {
	o := &output{v: formats[0], formats: formats}
	if c.output != "" {
		o.v = c.output
	}
	fs.Var(o, "o", "output `format`: "+strings.Join(formats, ", "))
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

// writeFlags adds -dry-run and -if-match.
func writeFlags(fs *flag.FlagSet) *client.WriteOptions {
	var o client.WriteOptions
	fs.BoolVar(&o.DryRun, "dry-run", false, "validate and show the change, write nothing")
	fs.Uint64Var(&o.IfMatch, "if-match", 0, "fail unless the node's rules are at this version")
	return &o
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
