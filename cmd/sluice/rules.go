package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/node/client"
	"github.com/sluicehq/sluice/node/rules"
	"gopkg.in/yaml.v3"
)

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
	o := c.outputFlag(fs, "table", "yaml", "json")
	pos, err := c.parse(fs, args)
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
	var rs client.RuleSet
	if len(pos) == 1 {
		var r json.RawMessage
		var v uint64
		err := c.ask(a, "GET", "/v1/rules/"+url.PathEscape(pos[0]), func(cx context.Context) (err error) {
			r, v, err = a.Rule(cx, pos[0])
			return err
		})
		if err != nil {
			return err
		}
		rs = client.RuleSet{Version: v, Rules: []json.RawMessage{r}}
		if *o == "json" {
			return c.json(r)
		}
	} else {
		err := c.ask(a, "GET", "/v1/rules", func(cx context.Context) (err error) {
			rs, err = a.Rules(cx)
			return err
		})
		if err != nil {
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

// algorithmList names the algorithms a rule may name, from lease's table
// (node/rules, offline), the exact ones so marked: "token_bucket, ...,
// sliding_log (exact), concurrency (exact, slots)".
func algorithmList() string {
	var b strings.Builder
	for i, a := range rules.Algorithms() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(a.Name)
		switch {
		case a.Slots:
			b.WriteString(" (exact, slots)")
		case !a.Leased:
			b.WriteString(" (exact)")
		}
	}
	return b.String()
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

func (c *cli) rulesApply(args []string) error {
	fs := newFlags("rules apply")
	file := fs.String("f", "", "rule file (- for stdin)")
	wo := writeFlags(fs)
	o := c.outputFlag(fs, "table", "json")
	pos, err := c.parse(fs, args)
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
	var ch client.Change
	err = c.ask(a, "PUT", "/v1/rules", func(cx context.Context) (err error) {
		ch, err = a.ApplyRules(cx, data, *wo)
		return err
	})
	if err != nil {
		return err
	}
	return c.change(ch, *o)
}

func (c *cli) rulesDelete(args []string) error {
	fs := newFlags("rules delete")
	wo := writeFlags(fs)
	o := c.outputFlag(fs, "table", "json")
	pos, err := c.parse(fs, args)
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
	var ch client.Change
	err = c.ask(a, "DELETE", "/v1/rules/"+url.PathEscape(pos[0]), func(cx context.Context) (err error) {
		ch, err = a.DeleteRule(cx, pos[0], *wo)
		return err
	})
	if err != nil {
		return err
	}
	return c.change(ch, *o)
}

func (c *cli) rulesDiff(args []string) error {
	fs := newFlags("rules diff")
	file := fs.String("f", "", "rule file (- for stdin)")
	o := c.outputFlag(fs, "table", "json")
	pos, err := c.parse(fs, args)
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
	var ch client.Change
	err = c.ask(a, "POST", "/v1/rules:validate", func(cx context.Context) (err error) {
		ch, err = a.ValidateRules(cx, data)
		return err
	})
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
	o := c.outputFlag(fs, "table", "json")
	pos, err := c.parse(fs, args)
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

func (c *cli) rulesTest(args []string) error {
	fs := newFlags("rules test")
	var req client.TestRequest
	fs.StringVar(&req.Method, "method", "GET", "the request's method")
	fs.StringVar(&req.Path, "path", "/", "the request's path and query")
	fs.StringVar(&req.Host, "host", "", "the request's host")
	fs.StringVar(&req.IP, "ip", "", "the client's IP (default 127.0.0.1)")
	hdrs := headerFlags{}
	fs.Var(hdrs, "H", "a request header 'Name: value' (repeatable)")
	o := c.outputFlag(fs, "table", "json")
	pos, err := c.parse(fs, args)
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
	var r client.TestResult
	err = c.ask(a, "POST", "/v1/rules:test", func(cx context.Context) (err error) {
		r, err = a.TestRules(cx, req)
		return err
	})
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
