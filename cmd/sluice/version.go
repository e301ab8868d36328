package main

import "github.com/sluicehq/sluice/cmd/internal/buildinfo"

func (c *cli) version(args []string) error {
	fs := newFlags("version")
	o := c.outputFlag(fs, "table", "json")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("version: unexpected %q", pos[0])
	}
	in := buildinfo.Get("sluice")
	if *o == "json" {
		return c.json(in)
	}
	_, err = c.out.Write([]byte(in.String() + "\n"))
	return err
}
