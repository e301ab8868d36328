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
